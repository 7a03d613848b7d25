//! Decoding one pod watch event as the operator's caches do (`sites_operator::watched::Pod`:
//! metadata without `managedFields`, the status fields the status mapping reads) against the
//! same type with the full `ObjectMeta` (its `managedFields` built, then dropped), on a pod as
//! kube-apiserver 1.20 sends it (`common/pod-1.20.json`: a Site's running pod from the real
//! 10,000-Site run, with the controller manager's and the kubelet's managed fields, 47% of its
//! bytes).
//!
//! Run: `cargo bench --bench watch_decode`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use sites_operator::watched::{Pod, PodStatus};
use std::hint::black_box;

// The allocator of the `sites-operator` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const POD: &str = include_str!("common/pod-1.20.json");

/// The pod as it was decoded before: the full metadata.
#[derive(Deserialize)]
#[allow(dead_code)]
struct FullMetadataPod {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Option<PodStatus>,
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("pod watch event");
    group.throughput(Throughput::Bytes(POD.len() as u64));
    group.bench_function("watched::Pod (no managedFields)", |b| {
        b.iter(|| serde_json::from_str::<Pod>(black_box(POD)).unwrap())
    });
    group.bench_function("full ObjectMeta", |b| {
        b.iter(|| serde_json::from_str::<FullMetadataPod>(black_box(POD)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
