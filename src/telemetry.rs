//! Logging set-up: `tracing` to standard error, as text or JSON, filtered by level directives.

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt;

use crate::config::LogLevel;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Crates whose logs `dependency_log_level` governs: the Kubernetes client and runtime.
const CLIENT_CRATES: &[&str] = &["kube", "kube_client", "kube_runtime", "kube_core"];
/// HTTP and TLS plumbing: kept at WARN unless the dependency level is DEBUG or finer.
const TRANSPORT_CRATES: &[&str] = &[
    "hyper",
    "hyper_util",
    "h2",
    "tower",
    "rustls",
    "tokio_rustls",
    "axum",
];

/// Filter directives for the dependency crates at `level`, appended after the user's level so
/// that they take precedence for those crates only.
pub fn dependency_directives(level: LogLevel) -> String {
    let transport = match level {
        LogLevel::Trace | LogLevel::Debug => level,
        _ => LogLevel::Warn.quieter(level),
    };
    CLIENT_CRATES
        .iter()
        .map(|c| format!("{c}={}", level.as_directive()))
        .chain(
            TRANSPORT_CRATES
                .iter()
                .map(|c| format!("{c}={}", transport.as_directive())),
        )
        .collect::<Vec<_>>()
        .join(",")
}

impl LogLevel {
    /// The less verbose of two levels.
    fn quieter(self, other: LogLevel) -> LogLevel {
        fn rank(l: LogLevel) -> u8 {
            match l {
                LogLevel::Trace => 0,
                LogLevel::Debug => 1,
                LogLevel::Info => 2,
                LogLevel::Warn => 3,
                LogLevel::Error => 4,
            }
        }
        if rank(self) >= rank(other) {
            self
        } else {
            other
        }
    }
}

/// Builds a filter from `--log-level` (a level such as `debug`, or full directives such as
/// `info,sites_operator=debug`).
pub fn filter(level: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .parse(level)
        .map_err(|e| format!("invalid --log-level {level:?}: {e}"))
}

/// Replaces the filter of the installed subscriber (set by [`init`]).
type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// The user's directives (`--log-level`) and how to replace the filter, once [`init`] ran.
static INSTALLED: OnceLock<(String, Reload)> = OnceLock::new();

/// Installs the global subscriber with the user's directives (`--log-level`, checked with
/// [`filter`]) and the dependency crates at INFO. Call once, before anything logs.
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = filter(&with_dependencies(level, LogLevel::Info))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let reload: Reload = match format {
        LogFormat::Text => {
            let builder = builder.with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()))
        }
        LogFormat::Json => {
            let builder = builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()))
        }
    };
    let _ = INSTALLED.set((level.to_string(), reload));
    Ok(())
}

/// Sets the level of the dependency crates (`sitesConfig.operator.dependency_log_level`, known
/// once the configuration is read, and followed when it changes); the user's directives stay.
pub fn set_dependency_level(level: LogLevel) {
    let Some((user, reload)) = INSTALLED.get() else {
        return;
    };
    match filter(&with_dependencies(user, level)).and_then(reload) {
        Ok(()) => tracing::debug!(level = level.as_directive(), "dependency log level set"),
        Err(e) => tracing::warn!(error = %e, "cannot set the dependency log level"),
    }
}

/// The dependency crates' directives, then the user's: a crate the user names (`kube=trace`)
/// keeps the user's level (of two directives for one target, the later one counts); a bare level
/// (`debug`) leaves the dependency crates at theirs.
fn with_dependencies(user: &str, level: LogLevel) -> String {
    let deps = dependency_directives(level);
    if user.trim().is_empty() {
        deps
    } else {
        format!("{deps},{user}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_level_governs_client_crates_and_transport_stays_quiet() {
        let info = dependency_directives(LogLevel::Info);
        assert!(info.contains("kube_runtime=info"));
        assert!(info.contains("hyper=warn"));
        let debug = dependency_directives(LogLevel::Debug);
        assert!(debug.contains("kube_client=debug"));
        assert!(debug.contains("hyper=debug"));
        let error = dependency_directives(LogLevel::Error);
        assert!(error.contains("kube=error"));
        assert!(error.contains("rustls=error"));
        assert!(filter(&format!("info,{debug}")).is_ok());
    }

    /// Whether an event of `target` at `level` passes the filter built from `directives`.
    fn passes(directives: &str, target: &str, level: tracing::Level) -> bool {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(filter(directives).unwrap());
        tracing::subscriber::with_default(subscriber, || match (target, level) {
            ("kube", tracing::Level::TRACE) => {
                tracing::enabled!(target: "kube", tracing::Level::TRACE)
            }
            ("kube", tracing::Level::INFO) => {
                tracing::enabled!(target: "kube", tracing::Level::INFO)
            }
            ("kube", tracing::Level::DEBUG) => {
                tracing::enabled!(target: "kube", tracing::Level::DEBUG)
            }
            ("sites_operator", tracing::Level::DEBUG) => {
                tracing::enabled!(target: "sites_operator", tracing::Level::DEBUG)
            }
            _ => unreachable!("not a case of this test"),
        })
    }

    #[test]
    fn a_crate_the_user_names_keeps_the_users_level() {
        use tracing::Level;
        // (--log-level, dependency level, target, level, passes)
        let cases = [
            (
                "info,kube=trace",
                LogLevel::Warn,
                "kube",
                Level::TRACE,
                true,
            ),
            ("info", LogLevel::Warn, "kube", Level::INFO, false),
            ("debug", LogLevel::Warn, "kube", Level::DEBUG, false),
            (
                "debug",
                LogLevel::Warn,
                "sites_operator",
                Level::DEBUG,
                true,
            ),
            ("info", LogLevel::Debug, "kube", Level::DEBUG, true),
            ("kube=error", LogLevel::Debug, "kube", Level::INFO, false),
        ];
        for (user, dependency, target, level, want) in cases {
            let directives = with_dependencies(user, dependency);
            assert_eq!(
                passes(&directives, target, level),
                want,
                "{user} with dependencies at {dependency:?}: {target} {level}"
            );
        }
    }

    #[test]
    fn bad_level_is_a_clear_error() {
        let err = filter("info,=[").unwrap_err();
        assert!(err.contains("--log-level"), "{err}");
        assert!(filter("debug").is_ok());
        assert!(filter("info,sites_operator=trace").is_ok());
    }
}
