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

#[cfg(test)]
mod tests {
    #[test]
    fn the_purge_delay_is_the_operators_unless_the_environment_sets_it() {
        let delay = super::tune();
        match std::env::var("MIMALLOC_PURGE_DELAY") {
            Ok(v) => assert_eq!(delay.to_string(), v),
            Err(_) => assert_eq!(delay, super::PURGE_DELAY_MS),
        }
    }
}
