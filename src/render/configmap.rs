//! The two ConfigMaps of a site (LIFE-01 step 3):
//! - `<id>`: the environment every site container reads (`envFrom`).
//! - `<id>-files`: the nginx server configuration that serves the site under `/<space>/<name>/`
//!   with the Site's extra response headers, and the platform error pages. Mounted read-only at
//!   [`FILES_MOUNT`] in every site container; the built-in web server includes `nginx.conf`.
//!
//! Both need the public host: without one rendering fails with the transient "Public host name
//! required" error. Header names and values come from a valid Site
//! ([`crate::rules::header`]), so no value can leave its nginx directive.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::ConfigMap;

use crate::Error;
use crate::config::PlatformConfig;
use crate::crd::Site;
use crate::labels;
use crate::render::apps::{self, ResolvedApp};
use crate::validation;

/// Where the `-files` ConfigMap is mounted in site containers.
pub const FILES_MOUNT: &str = "/etc/sites/files";
/// Where the site volume is mounted in site containers.
pub const DATA_MOUNT: &str = "/data";
/// Directory of the site's published files on the site volume.
pub const WEB_ROOT: &str = "/data/www";
/// Internal URL prefix of the platform error pages.
const ERRORS_LOCATION: &str = "/__sites/errors/";
/// Port the site server listens on when no built-in application serves the site path.
const DEFAULT_WEB_PORT: i32 = 8080;

/// How HTTP errors of a site are answered (`settings.error_handling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorHandling {
    /// The platform's error pages (default).
    Platform,
    /// The site's own error responses pass through.
    Site,
}

impl ErrorHandling {
    /// Reads `settings.error_handling` (absent: the platform's pages).
    pub fn parse(value: Option<&str>) -> Result<ErrorHandling, String> {
        match value {
            None | Some("platform") => Ok(ErrorHandling::Platform),
            Some("site") => Ok(ErrorHandling::Site),
            Some(other) => Err(format!("{other:?} is not one of \"platform\", \"site\"")),
        }
    }

    /// The setting of a valid Site.
    fn of(site: &Site) -> ErrorHandling {
        Self::parse(site.spec.configuration.settings.error_handling.as_deref())
            .unwrap_or(ErrorHandling::Platform)
    }
}

/// The public host the site is served on: `routing.host`, or in ingress mode the master
/// Ingress's host the caller found. Missing → the transient "Public host name required".
pub fn public_host(host: Option<&str>) -> Result<&str, Error> {
    let host = host
        .filter(|h| !h.is_empty())
        .ok_or(Error::PublicHostRequired)?;
    validation::host_name(host).map_err(|reason| Error::InvalidPublicHost { reason })?;
    Ok(host)
}

/// Base URL of the Hub.
fn hub_url(cfg: &PlatformConfig, host: &str) -> String {
    let hub_host = cfg
        .routing
        .hub_host
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(host);
    format!("{}://{hub_host}/hub/", cfg.routing.scheme.as_str())
}

/// ConfigMap `<id>`: the site's environment.
pub fn env_configmap(
    site: &Site,
    cfg: &PlatformConfig,
    host: Option<&str>,
) -> Result<ConfigMap, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let host = public_host(host)?;
    let handling = ErrorHandling::of(site);
    let c = &site.spec.configuration;
    let share = c.share.clone().unwrap_or_default();
    let path = apps::public_path(site);
    let data = BTreeMap::from([
        ("SITE_ID".to_string(), id.to_string()),
        ("SITE_NAME".into(), site.spec.name.clone()),
        ("SITE_SPACE".into(), c.space.clone()),
        ("SITE_OWNER".into(), site.spec.owner.clone()),
        ("SITE_TYPE".into(), site.spec.site_type.clone()),
        ("SITE_ENABLED".into(), c.enabled.to_string()),
        ("SITE_PATH".into(), path.clone()),
        (
            "SITE_URL".into(),
            format!("{}://{host}{path}", cfg.routing.scheme.as_str()),
        ),
        ("SITE_HOST".into(), host.to_string()),
        ("HUB_URL".into(), hub_url(cfg, host)),
        ("PLATFORM_VERSION".into(), cfg.sites.version.clone()),
        (
            "SITE_ADMINISTRATOR_USERS".into(),
            share.administrator_users.join(","),
        ),
        ("SITE_USERS".into(), share.users.join(",")),
        ("SITE_GROUPS".into(), share.groups.join(",")),
        (
            "SITE_ERROR_HANDLING".into(),
            match handling {
                ErrorHandling::Platform => "platform",
                ErrorHandling::Site => "site",
            }
            .into(),
        ),
        ("SITE_DATA_DIR".into(), DATA_MOUNT.into()),
        ("SITE_FILES_DIR".into(), FILES_MOUNT.into()),
    ]);
    Ok(ConfigMap {
        metadata: labels::object_meta(site, id)?,
        data: Some(data),
        ..Default::default()
    })
}

/// The nginx server block serving the site.
pub fn nginx_conf(site: &Site, apps: &[ResolvedApp<'_>], host: &str) -> Result<String, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let handling = ErrorHandling::of(site);
    let headers = &site.spec.configuration.headers;
    let site_path = apps::site_path(site);
    let port = apps::site_app(apps).map_or(DEFAULT_WEB_PORT, |a| a.port);
    let mut conf = String::new();
    let w = &mut conf;
    // Writing into a String cannot fail.
    let _ = writeln!(
        w,
        "# Site {id}: generated by sites-operator from the Site resource; edits are overwritten."
    );
    let _ = writeln!(w, "server {{");
    let _ = writeln!(w, "    listen {port};");
    let _ = writeln!(w, "    server_name {host};");
    let _ = writeln!(w, "    absolute_redirect off;");
    let _ = writeln!(w);
    let _ = writeln!(w, "    location = {site_path} {{");
    let _ = writeln!(w, "        return 302 {site_path}/;");
    let _ = writeln!(w, "    }}");
    let _ = writeln!(w);
    let _ = writeln!(w, "    location {site_path}/ {{");
    let _ = writeln!(w, "        alias {WEB_ROOT}/;");
    let _ = writeln!(w, "        index index.html;");
    for (name, value) in headers {
        let _ = writeln!(w, "        add_header {name} \"{value}\" always;");
    }
    let _ = writeln!(w, "    }}");
    if handling == ErrorHandling::Platform {
        let _ = writeln!(w);
        for (codes, page) in ERROR_PAGES {
            let _ = writeln!(w, "    error_page {codes} {ERRORS_LOCATION}{page};");
        }
        let _ = writeln!(w, "    location {ERRORS_LOCATION} {{");
        let _ = writeln!(w, "        internal;");
        let _ = writeln!(w, "        alias {FILES_MOUNT}/;");
        let _ = writeln!(w, "    }}");
    }
    let _ = writeln!(w, "}}");
    Ok(conf)
}

/// Status codes and the error page answering them.
const ERROR_PAGES: &[(&str, &str)] = &[
    ("403", "error-403.html"),
    ("404", "error-404.html"),
    ("500 502 503 504", "error-50x.html"),
];

fn error_page(title: &str, text: &str, hub: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>{title}</title></head>\n\
         <body>\n<h1>{title}</h1>\n<p>{text}</p>\n<p><a href=\"{hub}\">Back to the Hub</a></p>\n</body>\n</html>\n"
    )
}

/// ConfigMap `<id>-files`: `nginx.conf` and the error pages.
pub fn files_configmap(
    site: &Site,
    cfg: &PlatformConfig,
    apps: &[ResolvedApp<'_>],
    host: Option<&str>,
) -> Result<ConfigMap, Error> {
    let (id, _) = labels::id_and_namespace(site)?;
    let host = public_host(host)?;
    let hub = hub_url(cfg, host);
    let data = BTreeMap::from([
        ("nginx.conf".to_string(), nginx_conf(site, apps, host)?),
        (
            "error-403.html".into(),
            error_page("Forbidden", "You do not have access to this page.", &hub),
        ),
        (
            "error-404.html".into(),
            error_page("Not found", "This page does not exist.", &hub),
        ),
        (
            "error-50x.html".into(),
            error_page(
                "Site unavailable",
                "The site cannot answer right now. Please try again in a few minutes.",
                &hub,
            ),
        ),
    ]);
    Ok(ConfigMap {
        metadata: labels::object_meta(site, &labels::files_configmap_name(id))?,
        data: Some(data),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_required_and_checked() {
        assert!(matches!(public_host(None), Err(Error::PublicHostRequired)));
        assert!(matches!(
            public_host(Some("")),
            Err(Error::PublicHostRequired)
        ));
        assert_eq!(
            Error::PublicHostRequired.to_string().split(':').next(),
            Some("Public host name required")
        );
        assert!(Error::PublicHostRequired.is_transient());
        assert!(public_host(Some("sites.example.org")).is_ok());
        assert!(public_host(Some("bad host; return")).is_err());
    }
}
