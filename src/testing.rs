//! The unit tests' allocator: the system allocator, counting what the current thread holds
//! while [`measure`] runs, so a test can bound the memory a piece of code takes (tests run on
//! threads of their own; only the measuring thread's allocations count), and the bytes each
//! thread holds net of what it freed ([`net_bytes`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
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
    // `try_with`: a thread being torn down has no counters left, and is not measured.
    let _ = ON.try_with(|on| {
        if on.get() {
            let held = HELD.with(|h| {
                h.set(h.get() + delta);
                h.get()
            });
            PEAK.with(|p| p.set(p.get().max(held)));
        }
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters are
// thread-local cells that never allocate.
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

/// Runs `f` and returns its result and the most bytes this thread held at once during the
/// call beyond what it held before (allocations freed within the call included at their peak).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    HELD.with(|h| h.set(0));
    PEAK.with(|p| p.set(0));
    ON.with(|on| on.set(true));
    let out = f();
    ON.with(|on| on.set(false));
    // Bytes freed inside the call that were allocated before it make `held` negative, never
    // the peak.
    (out, PEAK.with(Cell::get).max(0) as usize)
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
