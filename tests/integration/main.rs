//! Black-box tests: the `sites-operator` binary, and the Kubernetes API emulator through
//! `kube::Client` and the real kubectl. One test binary with modules: faster to link than one
//! binary per file.

mod chaos;
mod cli;
mod e2e;
mod emulator_admission;
mod emulator_api;
mod emulator_controllers;
mod emulator_kubectl;
mod playground;
mod prometheus;
mod reconcile;
mod render;
mod support;
mod upgrade;
mod webhook_e2e;
mod webhook_server;
