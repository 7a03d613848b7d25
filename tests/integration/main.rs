//! Black-box tests of the `sites-operator` binary and library against the Kubernetes API
//! emulator. One test binary with modules: faster to link than one binary per file. The
//! emulator's own tests live in its crate (`tests/emulator/tests/emulator/`).

mod availability;
mod chaos;
mod cli;
mod e2e;
mod gitops;
mod live_config;
mod ownership;
mod playground;
mod prometheus;
mod real_apiserver;
mod real_chaos;
mod real_deletion;
mod real_restart;
mod real_routing;
mod reconcile;
mod render;
mod rollout;
mod structure;
mod support;
mod upgrade;
mod webhook_e2e;
mod webhook_hostile;
mod webhook_server;
