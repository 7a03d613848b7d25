//! Black-box tests of the Kubernetes API emulator, through `kube::Client` and the real kubectl.
//! One test binary with modules: faster to link than one binary per file.

mod admission;
mod api;
mod authorization;
mod cluster;
mod controllers;
mod fidelity;
mod kubectl;
mod kubelet;
mod managed;
mod merge;
mod priority;
mod subresources;
mod support;
