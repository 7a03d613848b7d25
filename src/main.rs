//! `sites-operator`: command-line entry point.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use sites_operator::config::{ConfigError, Context, PlatformConfig};
use sites_operator::telemetry::{self, LogFormat};

/// Kubernetes operator and admission webhook server for Site resources (sites.ecmwf.int/v1).
///
/// A Site describes a hosted web site; the operator turns each Site into its Kubernetes objects
/// and reports the state of its pods back into the Site status.
#[derive(Parser, Debug)]
#[command(name = "sites-operator", version, propagate_version = true)]
struct Cli {
    /// Log output format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SITES_OPERATOR_LOG_FORMAT")]
    log_format: LogFormat,

    /// Log level (error, warn, info, debug, trace) or filter directives such as
    /// `info,sites_operator=debug`.
    #[arg(
        long,
        global = true,
        default_value = "info",
        env = "SITES_OPERATOR_LOG_LEVEL"
    )]
    log_level: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the Site CustomResourceDefinition as YAML.
    ///
    /// The output is what `manifests/crd.yaml` holds: `sites-operator crd | kubectl apply -f -`
    /// installs or updates the CRD.
    Crd,

    /// Validate a platform configuration file.
    ///
    /// FILE is the configuration YAML (the `config.yaml` key of the `sites-config` ConfigMap),
    /// or a ConfigMap manifest holding it, or `-` for standard input. Prints `ok` and exits 0 when
    /// the configuration is valid; otherwise prints one line per problem, `key: message`, and
    /// exits 2.
    CheckConfig {
        /// Configuration file, ConfigMap manifest, or `-` for standard input.
        file: PathBuf,
        /// Namespace the platform is installed in; enables the rule that a chart-created Gateway
        /// lives in that namespace.
        #[arg(long)]
        namespace: Option<String>,
    },
}

/// Exit code for invalid input: a bad configuration, unreadable file, bad flag value.
const EXIT_INVALID: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = match telemetry::filter(&cli.log_level) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    telemetry::init(cli.log_format, filter);

    match cli.command {
        Command::Crd => {
            print!("{}", sites_operator::crd::crd_yaml());
            ExitCode::SUCCESS
        }
        Command::CheckConfig { file, namespace } => {
            let ctx = Context {
                namespace: namespace.as_deref(),
            };
            match PlatformConfig::load(&file, &ctx) {
                Ok(_) => {
                    println!("ok");
                    ExitCode::SUCCESS
                }
                Err(ConfigError::Invalid(problems)) => {
                    for p in problems {
                        println!("{p}");
                    }
                    ExitCode::from(EXIT_INVALID)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_INVALID)
                }
            }
        }
    }
}
