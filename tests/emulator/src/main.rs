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
    /// Authorize requests as an RBAC cluster: the tokens it issues (`kubectl create token`) act
    /// as their service accounts and are refused (403) what the stored RBAC does not grant; the
    /// written kubeconfig stays the administrator.
    #[arg(long)]
    authorize: bool,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "emulator.kubeconfig")]
    kubeconfig: PathBuf,
    /// Where an in-cluster Service is served locally, for admission webhooks:
    /// `NAMESPACE/NAME:PORT=HOST:PORT` (repeatable), e.g.
    /// `sites/sites-operator-webhook:443=127.0.0.1:9443`.
    #[arg(long = "service", value_parser = parse_service)]
    services: Vec<(String, String, u16, std::net::SocketAddr)>,
}

fn parse_service(s: &str) -> Result<(String, String, u16, std::net::SocketAddr), String> {
    let bad = || format!("{s:?}: expected NAMESPACE/NAME:PORT=HOST:PORT");
    let (service, addr) = s.split_once('=').ok_or_else(bad)?;
    let (ns, rest) = service.split_once('/').ok_or_else(bad)?;
    let (name, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let addr: std::net::SocketAddr = addr.parse().map_err(|_| bad())?;
    Ok((ns.to_string(), name.to_string(), port, addr))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let emulator = match sites_emulator::Emulator::start(sites_emulator::Options {
        tls: cli.tls,
        port: cli.port,
        authorize: cli.authorize,
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
    for (ns, name, port, addr) in &cli.services {
        emulator.map_service(ns, name, *port, *addr);
    }
    println!("emulator listening on {}", emulator.url());
    println!("kubeconfig: {}", cli.kubeconfig.display());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    std::process::ExitCode::SUCCESS
}
