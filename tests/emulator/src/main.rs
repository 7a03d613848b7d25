//! `sites-emulator`: runs the Kubernetes API emulator on a port and writes a kubeconfig;
//! `sites-emulator kubelet` runs its simulated kubelet (with scheduler and volume provisioner)
//! against another API server.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sites_emulator::controllers::Behaviour;

/// Kubernetes API server emulator for local use and tests.
#[derive(Parser, Debug)]
#[command(
    name = "sites-emulator",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
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

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Runs the emulator's simulated kubelet against another API server.
    ///
    /// For an API server without scheduler and kubelet: registers a Ready node, binds
    /// unscheduled pods to it, runs them as the emulator does (pod annotation
    /// `sites-emulator.test/behaviour`: Ready, NeverReady, CrashLoop, ImagePullFailure),
    /// deletes pods whose deletion is due and provisions hostPath volumes pre-bound to the
    /// claims of the given storage classes. Runs until SIGTERM or SIGINT.
    Kubelet(KubeletArgs),
}

#[derive(clap::Args, Debug)]
struct KubeletArgs {
    /// Kubeconfig of the API server (current context: server, certificate authority, token).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The Node's name.
    #[arg(long, default_value = sites_emulator::cluster::NODE_NAME)]
    node: String,
    /// Provision volumes for the claims of this StorageClass (repeatable).
    #[arg(long = "storage-class")]
    storage_classes: Vec<String>,
    /// How containers of an image behave unless their pod's annotation says otherwise:
    /// `IMAGE=Ready|NeverReady|CrashLoop|ImagePullFailure` (repeatable).
    #[arg(long = "image-behaviour", value_parser = parse_image_behaviour)]
    image_behaviours: Vec<(String, Behaviour)>,
    /// Written once the node is registered and Ready.
    #[arg(long)]
    ready_file: Option<PathBuf>,
}

fn parse_image_behaviour(s: &str) -> Result<(String, Behaviour), String> {
    let (image, behaviour) = s
        .rsplit_once('=')
        .filter(|(i, _)| !i.is_empty())
        .ok_or_else(|| format!("{s:?}: expected IMAGE=BEHAVIOUR"))?;
    Ok((image.to_string(), behaviour.parse()?))
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

/// Completes on SIGTERM or SIGINT.
async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn kubelet(args: KubeletArgs) -> std::process::ExitCode {
    let client = match sites_emulator::client::load_kubeconfig(&args.kubeconfig)
        .and_then(|t| sites_emulator::client::Client::new(&t))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let config = sites_emulator::node::Config {
        node: args.node,
        storage_classes: args.storage_classes,
        ready_file: args.ready_file,
        image_behaviours: args.image_behaviours.into_iter().collect::<HashMap<_, _>>(),
    };
    println!("kubelet: node {}", config.node);
    sites_emulator::node::run(client, config, terminated()).await;
    std::process::ExitCode::SUCCESS
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Kubelet(args)) = cli.command {
        return kubelet(args).await;
    }
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
    terminated().await;
    std::process::ExitCode::SUCCESS
}
