//! The unit tests' allocator: the system allocator, counting what every thread of the process
//! holds while [`measure`] runs, so a test can bound the memory a piece of code takes whatever
//! threads do its work (the test runs alone in a process of its own, [`alone`]: other tests'
//! allocations would count too), and the bytes each thread holds net of what it freed
//! ([`net_bytes`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

pub struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Whether [`measure`] is counting.
static ON: AtomicBool = AtomicBool::new(false);
/// Bytes held by every thread since the measurement started, and their most at once.
static HELD: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// One measurement at a time.
static MEASURING: Mutex<()> = Mutex::new(());
/// Set in the process [`alone`] runs a test in.
static ALONE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Bytes allocated by this thread less the bytes it freed, as requested (no size classes),
    /// counted always.
    static NET: Cell<isize> = const { Cell::new(0) };
}

/// What an allocation of `size` bytes takes: allocators round small blocks up to size classes
/// (16 bytes at least, in steps of 16).
fn taken(size: usize) -> isize {
    size.max(16).next_multiple_of(16) as isize
}

/// Counts `delta` requested bytes in [`NET`] (a thread being torn down is not counted).
fn net(delta: isize) {
    let _ = NET.try_with(|n| n.set(n.get() + delta));
}

fn count(delta: isize) {
    if ON.load(Ordering::Relaxed) {
        let held = HELD.fetch_add(delta, Ordering::Relaxed) + delta;
        PEAK.fetch_max(held, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters are atomics
// and thread-local cells that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(taken(layout.size()));
            net(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(taken(layout.size()));
            net(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-taken(layout.size()));
        net(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // While moving, both blocks may be held: count the new one first.
            count(taken(new_size));
            count(-taken(layout.size()));
            net(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Runs `f` and returns its result and the most bytes the process held at once during the call
/// beyond what it held before (allocations freed within the call included at their peak),
/// whichever threads allocated them: work `f` hands to other threads counts. Only in a test
/// run [`alone`], where no other test allocates.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    assert!(
        ALONE.load(Ordering::Acquire),
        "measure counts every thread of the process: call it in a test run alone (testing::alone)"
    );
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    HELD.store(0, Ordering::SeqCst);
    PEAK.store(0, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
    let out = f();
    ON.store(false, Ordering::SeqCst);
    // Bytes freed inside the call that were allocated before it make `held` negative, never
    // the peak.
    (out, PEAK.load(Ordering::SeqCst).max(0) as usize)
}

/// The environment variable that tells a test process it runs one test alone, and which.
const ALONE_VAR: &str = "SITES_OPERATOR_TEST_ALONE";

/// Runs the test `test` of the module `module` (its `module_path!()`) alone, in a process of
/// its own: returns true in that process, where the caller then runs the test's body (and may
/// [`measure`]); false in the test's own process, once the other one ran and passed the test
/// (it panics otherwise). Whether the test runner gives each test a process of its own (nextest)
/// or not (`cargo test`), the test runs in a process where nothing else does.
pub fn alone(module: &str, test: &str) -> bool {
    // The test's path in the test binary: the module's without the crate's name.
    let module = module.split_once("::").map_or("", |(_, path)| path);
    let name = format!("{module}::{test}");
    let name = name.as_str();
    if std::env::var_os(ALONE_VAR).is_some_and(|v| v == name) {
        ALONE.store(true, Ordering::Release);
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE_VAR, name)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, run alone: {}\n{stdout}\n{stderr}",
        out.status
    );
    false
}

/// The environment variable that makes a processor without AVX2 fail the tests that compare
/// the AVX2 code with its reference (CI sets it: `.ci/run`).
pub const REQUIRE_AVX2: &str = "SITES_OPERATOR_REQUIRE_AVX2";

/// Whether this processor has AVX2, for a test (`test` names it) that compares the AVX2 code
/// with its reference. Without AVX2 the comparison cannot run: that is a failure when
/// [`REQUIRE_AVX2`] is set, and otherwise said on stderr (once per process), never passed over
/// silently. The scalar and SSE2 comparisons run on every x86_64 processor regardless.
#[cfg(target_arch = "x86_64")]
pub fn avx2(test: &str) -> bool {
    if std::arch::is_x86_feature_detected!("avx2") {
        return true;
    }
    let required = std::env::var_os(REQUIRE_AVX2).is_some_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "{test}: this processor has no AVX2, so the AVX2 code is not compared with its \
         reference, and {REQUIRE_AVX2} is set"
    );
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "SKIPPED: {test}: this processor has no AVX2; the AVX2 code is not compared with its \
             reference (set {REQUIRE_AVX2}=1 to make this a failure)"
        );
    });
    false
}

/// Runs `f` and returns its result and the bytes this thread allocated during the call less
/// those it freed: what `f` built and left behind (in its result, or in structures it filled),
/// as the sizes asked of the allocator. Transient allocations cancel out; memory allocated
/// before the call and freed within it counts negative.
pub fn net_bytes<T>(f: impl FnOnce() -> T) -> (T, isize) {
    let before = NET.with(Cell::get);
    let out = f();
    (out, NET.with(Cell::get) - before)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What other threads allocate for the work measured counts as the measuring thread's own.
    #[test]
    fn a_measurement_counts_every_thread() {
        if !alone(module_path!(), "a_measurement_counts_every_thread") {
            return;
        }
        const MIB: usize = 1 << 20;
        let (_, here) = measure(|| std::hint::black_box(vec![1u8; MIB]).len());
        let (_, there) = measure(|| {
            std::thread::scope(|s| {
                s.spawn(|| std::hint::black_box(vec![1u8; MIB]).len())
                    .join()
                    .unwrap()
            })
        });
        for peak in [here, there] {
            assert!((MIB..2 * MIB).contains(&peak), "{peak}");
        }
    }
}
