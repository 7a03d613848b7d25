//! Rendered objects meet the API server: every object the renderer produces for the example
//! Sites is accepted by the emulator (schema, defaults, immutability), the StatefulSet's pods
//! carry the id label and the operator_bound annotation, and deleting the Site removes every
//! object through the owner references (LIFE-05).

use std::time::Duration;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use sites_operator::config::{Installation, PlatformConfig, RoutingMode};
use sites_operator::crd::{OPERATOR_BOUND_ANNOTATION, Site};
use sites_operator::render::{self, Inputs, Route, SiteTokens};

use crate::support::{Cluster, eventually, repo_file};

const WAIT: Duration = Duration::from_secs(20);
const NS: &str = "default";

fn config(mode: RoutingMode) -> PlatformConfig {
    let mut cfg = PlatformConfig::load(
        &repo_file("manifests/base/config.yaml"),
        &Installation::default(),
    )
    .expect("example configuration");
    cfg.routing.mode = mode;
    cfg
}

async fn create<K>(c: &Cluster, obj: &K)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(c.client.clone(), NS);
    if let Err(e) = api.create(&PostParams::default(), obj).await {
        panic!(
            "{} {:?} rejected: {e}",
            K::kind(&K::DynamicType::default()),
            obj.meta().name
        );
    }
}

#[tokio::test]
async fn rendered_objects_are_accepted_and_cascade_with_the_site() {
    let c = Cluster::start(false).await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    crds.create(
        &PostParams::default(),
        &sites_operator::definitions::gateway_api_crds()[0],
    )
    .await
    .expect("HTTPRoute CRD is accepted");
    let sites: Api<Site> = Api::namespaced(c.client.clone(), NS);
    let text =
        std::fs::read_to_string(repo_file("manifests/examples/site-custom-app.yaml")).unwrap();
    let site: Site = serde_yaml_ng::from_str(&text).unwrap();
    let site = sites
        .create(&PostParams::default(), &site)
        .await
        .expect("Site created");
    let id = site.metadata.name.clone().unwrap();

    let tokens = SiteTokens::keep_or_generate(None, || uuid::Uuid::new_v4().simple().to_string());
    let state = sites_operator::restart::decide(None, &site, &config(RoutingMode::Ingress)).state;
    let mut rendered = Vec::new();
    for mode in [RoutingMode::Ingress, RoutingMode::Gateway] {
        let cfg = config(mode);
        let host = cfg.routing.host.as_deref();
        let inputs = Inputs::new(NS, host, b"integration-session-key", &tokens, &state);
        let valid = sites_operator::rules::validate(&site, &cfg).expect("valid");
        rendered.push(render::render(valid, &cfg, &inputs).expect("renders"));
    }
    let r = &rendered[0];
    create(&c, &r.secret).await;
    create(&c, &r.oauth2_secret).await;
    create(&c, &r.env_configmap).await;
    create(&c, &r.files_configmap).await;
    create(&c, &r.pvc).await;
    create(&c, &r.statefulset).await;
    create(&c, &r.service).await;
    match (&rendered[0].route, &rendered[1].route) {
        (Some(Route::Ingress(i)), Some(Route::HttpRoute(h))) => {
            create(&c, i).await;
            create(&c, h).await;
        }
        other => panic!("expected an Ingress and an HTTPRoute, got {other:?}"),
    }

    // The pod template is what the StatefulSet controller stamps pods from.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
    let selector = ListParams::default().labels(&format!("sites.ecmwf.int/id={id}"));
    let pod = eventually("a site pod", WAIT, || async {
        pods.list(&selector).await.ok()?.items.into_iter().next()
    })
    .await;
    let annotations = pod.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get(OPERATOR_BOUND_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );

    // No finalizer: deleting the Site cascades to every owned object.
    sites
        .delete(&id, &DeleteParams::foreground())
        .await
        .expect("Site deleted");
    eventually("owned objects removed", WAIT, || async {
        let lp = ListParams::default().labels(&format!("sites.ecmwf.int/id={id}"));
        let client = c.client.clone();
        let left = Api::<Secret>::namespaced(client.clone(), NS)
            .list(&lp)
            .await
            .ok()?
            .items
            .len()
            + Api::<ConfigMap>::namespaced(client.clone(), NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + Api::<PersistentVolumeClaim>::namespaced(client.clone(), NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + Api::<StatefulSet>::namespaced(client.clone(), NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + Api::<Service>::namespaced(client.clone(), NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + Api::<Ingress>::namespaced(client.clone(), NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + Api::<HttpRoute>::namespaced(client.clone(), NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len()
            + Api::<Pod>::namespaced(client, NS)
                .list(&lp)
                .await
                .ok()?
                .items
                .len();
        (left == 0).then_some(())
    })
    .await;
}
