//! Settings of the process's allocator (mimalloc, the binary's `#[global_allocator]`).
//!
//! mimalloc gives memory it no longer uses back to the system after a purge delay, 1,000 ms by
//! default. A restarted operator lists every kind it watches and reconciles every Site within
//! a second or two: with the default, what those lists and reconciles freed was still resident
//! at the peak (98-101 MiB at 10,000 Sites, against 94 MiB with 100 ms and the same CPU time;
//! BENCHMARKS.md).

use std::os::raw::c_long;

/// `mi_option_purge_delay` in the `mi_option_t` enum of the mimalloc v3 header this build links
/// (`mimalloc.h`; the `libmimalloc-sys` crate exports no name for it).
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;
/// mimalloc v3's default for that option, which tells that the number names it.
const DEFAULT_PURGE_DELAY_MS: c_long = 1000;
/// The operator's purge delay.
pub const PURGE_DELAY_MS: c_long = 100;

/// Shortens mimalloc's purge delay to [`PURGE_DELAY_MS`], unless `MIMALLOC_PURGE_DELAY` sets it
/// (mimalloc reads that variable itself) or the option number no longer names the purge delay
/// (a mimalloc whose option holds another default). Returns the delay in force, in ms.
pub fn tune() -> c_long {
    // SAFETY: reading and setting an option by its number; mimalloc checks the number's range
    // and the options are atomics it reads when it purges.
    unsafe {
        let current = libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION);
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() && current == DEFAULT_PURGE_DELAY_MS {
            libmimalloc_sys::mi_option_set(PURGE_DELAY_OPTION, PURGE_DELAY_MS);
        }
        libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION)
    }
}

/// What the running program's allocations go to and the purge delay in force: what a test of
/// the shipped binary reads (the binary logs it at start, at debug level), since a test process
/// has an allocator of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InUse {
    /// The program's global allocator is mimalloc: a fresh heap allocation lies in mimalloc's
    /// heap. False in a program that links mimalloc without declaring it its
    /// `#[global_allocator]` (the library's own tests).
    pub mimalloc: bool,
    /// mimalloc's purge delay, in ms.
    pub purge_delay_ms: c_long,
}

/// Probes the allocator of the running program ([`InUse`]).
pub fn in_use() -> InUse {
    // An allocation the optimiser cannot drop, made by whatever the global allocator is.
    let probe = std::hint::black_box(Box::new(0u64));
    let address: *const u64 = &*probe;
    InUse {
        mimalloc: from_mimalloc(address.cast()),
        // SAFETY: reading an option by its number as in `tune`.
        purge_delay_ms: unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION) },
    }
}

/// Whether `address`, in a live heap block, lies in a page of mimalloc's heap.
fn from_mimalloc(address: *const u8) -> bool {
    // SAFETY: `mi_is_in_heap_region` only looks the address up in mimalloc's page map, for any
    // address.
    unsafe { libmimalloc_sys::mi_is_in_heap_region(address.cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe tells allocators apart by the block, not by whether mimalloc runs: this test
    /// binary links mimalloc and allocates with the system allocator; once mimalloc has
    /// allocated too, a block of each is told apart, and the program's allocator is seen to be
    /// the system's. (The binary's own settings are tested on the binary:
    /// `tests/integration/cli.rs`.)
    #[test]
    fn the_probe_tells_a_mimalloc_block_from_a_system_one() {
        for size in [8, 64 << 10, 4 << 20] {
            // SAFETY: a block of `size` bytes, freed below and not used otherwise.
            let block = unsafe { libmimalloc_sys::mi_malloc(size) };
            assert!(!block.is_null());
            let system = std::hint::black_box(vec![0u8; size]);
            let seen = (from_mimalloc(block.cast()), from_mimalloc(system.as_ptr()));
            // SAFETY: allocated above by mi_malloc.
            unsafe { libmimalloc_sys::mi_free(block) };
            assert_eq!(seen, (true, false), "blocks of {size} bytes");
            assert!(!in_use().mimalloc, "{size}");
        }
    }
}
