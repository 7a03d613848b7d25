//! Handler-only cost of the Site webhooks (no TLS, no HTTP): decode the AdmissionReview, run the
//! handler, encode the answer, for the typical (~4 KB) and the large (~100 KB) Site. The server's
//! path decodes the Site typed (`SiteBody::decode`: the review reader; `decode only, serde_json`
//! is the same decoding by serde_json, which the server uses for bodies the reader refuses); the
//! generic path (`decode` into a `DynamicObject`, then a Site) is what bodies that are not Sites
//! take, measured for comparison.
//!
//! Run: `cargo bench --bench admission`.

#[path = "common/bodies.rs"]
mod bodies;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sites_operator::admission::{self, review};
use sites_operator::config::{Installation, PlatformConfig};
use std::hint::black_box;

// The allocator of the `sites-operator` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn handlers(c: &mut Criterion) {
    let cfg = PlatformConfig::from_yaml(bodies::CONFIG, "config.yaml", &Installation::default())
        .expect("platform configuration");
    let platform = admission::Platform::default();
    for (name, body) in [("typical", bodies::typical()), ("large", bodies::large())] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("validate: decode+rules+encode", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode().expect("decodes");
                let resp = admission::validate_site(&req, &cfg, &platform);
                assert!(resp.allowed, "{:?}", resp.result);
                review::encode(&resp).expect("encodes")
            })
        });
        group.bench_function("mutate: decode+stamp+encode", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode().expect("decodes");
                let resp = admission::mutate_site(&req, &cfg, uuid::Uuid::new_v4);
                review::encode(&resp).expect("encodes")
            })
        });
        group.bench_function("decode only", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode().expect("decodes");
                black_box(&req);
            })
        });
        group.bench_function("decode only, serde_json", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode_with_serde_json().expect("decodes");
                black_box(&req);
            })
        });
        let site_body = review::SiteBody::new(&body).expect("text");
        assert!(
            site_body.read().is_some(),
            "the review reader reads the {name} body"
        );
        let req = site_body.decode().expect("decodes");
        group.bench_function("rules only", |b| {
            b.iter(|| admission::validate_site(black_box(&req), &cfg, &platform))
        });
        group.bench_function("generic path: decode+rules+encode", |b| {
            b.iter(|| {
                let req = review::decode(black_box(&body)).expect("decodes");
                let resp = admission::validate_site(&req, &cfg, &platform);
                assert!(resp.allowed, "{:?}", resp.result);
                review::encode(&resp).expect("encodes")
            })
        });
        group.finish();
    }
}

/// The configuration webhook on its costliest valid-size shape: `sitesConfig.applications` with
/// as many empty entries as the 64 KiB text limit allows (each entry gets two violations).
fn empty_catalogue(c: &mut Criterion) {
    let entries = (64 * 1024 - 64) / 4;
    let yaml = format!(
        "sitesConfig: {{applications: [{}]}}\n",
        vec!["{}"; entries].join(", ")
    );
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6e2b1f0c-0000-4000-8000-000000000002",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "sites-config", "namespace": "sites", "operation": "UPDATE",
            "userInfo": {"username": "a"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "sites-config", "namespace": "sites"},
                       "data": {"config.yaml": yaml}}
        }
    }))
    .expect("a review");
    let mut group = c.benchmark_group(format!("config, {entries} empty applications"));
    group.bench_function("validate-config: decode+rules+encode", |b| {
        b.iter(|| {
            let answer = sites_operator::admission::server::review_config(black_box(&body));
            assert_eq!(answer.status(), 200);
            answer
        })
    });
    group.finish();
}

criterion_group!(benches, handlers, empty_catalogue);
criterion_main!(benches);
