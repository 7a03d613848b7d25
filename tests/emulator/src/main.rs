//! `sites-emulator`: runs the Kubernetes API emulator on a port and writes a kubeconfig.

use std::path::PathBuf;

use clap::Parser;

/// Kubernetes API server emulator for local use and tests.
#[derive(Parser, Debug)]
#[command(name = "sites-emulator", version)]
struct Cli {
    /// Port on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Serve HTTPS with a generated CA (written into the kubeconfig).
    #[arg(long)]
    tls: bool,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "emulator.kubeconfig")]
    kubeconfig: PathBuf,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let emulator = match sites_emulator::Emulator::start(sites_emulator::Options {
        tls: cli.tls,
        port: cli.port,
        ..Default::default()
    })
    .await
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot start the emulator: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = emulator.write_kubeconfig(&cli.kubeconfig) {
        eprintln!("error: cannot write {}: {e}", cli.kubeconfig.display());
        return std::process::ExitCode::from(2);
    }
    println!("emulator listening on {}", emulator.url());
    println!("kubeconfig: {}", cli.kubeconfig.display());
    let _ = tokio::signal::ctrl_c().await;
    std::process::ExitCode::SUCCESS
}
