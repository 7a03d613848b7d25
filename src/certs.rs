//! Development and self-signed certificates: a CA and a serving certificate for the webhook
//! Service's DNS names (rcgen, ECDSA P-256).

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// File names written by [`Bundle::write`] (the `kubernetes.io/tls` Secret key names, plus the CA).
pub const CA_FILE: &str = "ca.crt";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// A CA certificate and a serving certificate + key signed by it, all PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle").finish_non_exhaustive()
    }
}

/// Why certificates could not be generated or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {reason}")]
    Write { path: String, reason: String },
}

/// The DNS names the API server uses to reach a Service: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`
/// and `<svc>.<ns>.svc.cluster.local`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// What the leaf certificate of a [`Bundle`] is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// TLS server authentication (the webhook server).
    Server,
    /// TLS client authentication (e.g. an API server calling the webhooks with `--client-ca`).
    Client,
}

/// Generates a CA and a serving certificate for `names` (DNS names or IP addresses), valid for
/// `days` days from now.
pub fn generate(names: &[String], days: u32) -> Result<Bundle, CertError> {
    generate_for(names, days, Usage::Server)
}

/// Generates a CA and a leaf certificate for `usage`.
pub fn generate_for(names: &[String], days: u32, usage: Usage) -> Result<Bundle, CertError> {
    generate_with(
        names,
        days,
        |_| {},
        |leaf| {
            leaf.extended_key_usages = vec![match usage {
                Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
                Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
            }];
        },
    )
}

/// Generates a CA and a leaf certificate for `names`, valid for `days` days from now, the leaf
/// with the digital signature key usage; `adjust_ca` and `adjust_leaf` set the rest of their
/// parameters (the leaf's extended key usages; tests make certificates unfit in other ways).
pub(crate) fn generate_with(
    names: &[String],
    days: u32,
    adjust_ca: impl FnOnce(&mut CertificateParams),
    adjust_leaf: impl FnOnce(&mut CertificateParams),
) -> Result<Bundle, CertError> {
    let now = time_now();
    let until = now + rcgen_duration(days);

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(DnType::CommonName, "sites-operator webhook CA");
    ca.not_before = now;
    ca.not_after = until;
    adjust_ca(&mut ca);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca, &ca_key);

    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(Vec::<String>::new())?;
    leaf.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n.clone().try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        names
            .first()
            .cloned()
            .unwrap_or_else(|| "sites-operator".into()),
    );
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.not_before = now;
    leaf.not_after = until;
    adjust_leaf(&mut leaf);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn time_now() -> time::OffsetDateTime {
    // One minute of slack for clocks that are slightly behind.
    time::OffsetDateTime::now_utc() - std::time::Duration::from_secs(60)
}

fn rcgen_duration(days: u32) -> std::time::Duration {
    std::time::Duration::from_secs(u64::from(days) * 86_400)
}

impl Bundle {
    /// Writes `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`, a directory of this
    /// user's that no one else may write ([`private_dir`]).
    pub fn write(&self, dir: &Path) -> Result<(), CertError> {
        let err = |path: &Path, e: std::io::Error| CertError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        private_dir(dir).map_err(|e| err(dir, e))?;
        for (name, content, private) in [
            (CA_FILE, &self.ca_pem, false),
            (CERT_FILE, &self.cert_pem, false),
            (KEY_FILE, &self.key_pem, true),
        ] {
            let path = dir.join(name);
            write_file(&path, content.as_bytes(), private).map_err(|e| err(&path, e))?;
        }
        Ok(())
    }
}

/// Makes sure `dir` is a directory that only this process's user controls, creating it (and
/// its missing parents) when it does not exist: the new directory gets mode 0700. An existing
/// one is used only when this user owns it and neither its group nor others may write to it; its
/// permissions are not changed. A symlink there is followed only when this user or root owns
/// it, each link of a chain alike.
///
/// Whoever can write to the directory can replace the key and certificate served; whoever owns
/// it can grant that. The default `--cert-dir` is under /tmp, where any user may have created
/// it first (as `ssh` and `tmux` do with their own directories, such a directory is refused,
/// not repaired).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    match builder.create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    #[cfg(unix)]
    check_private(dir)?;
    #[cfg(not(unix))]
    if !std::fs::metadata(dir)?.is_dir() {
        return Err(std::io::Error::other("not a directory"));
    }
    Ok(())
}

/// The checks of [`private_dir`] on an existing `dir`.
#[cfg(unix)]
fn check_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let refuse = |what: String| Err(std::io::Error::other(what));
    // Symlinks, each checked before it is followed (the kernel allows 40 in a path).
    let mut at = dir.to_path_buf();
    for _ in 0..40 {
        let meta = std::fs::symlink_metadata(&at)?;
        if !meta.file_type().is_symlink() {
            break;
        }
        if meta.uid() != me && meta.uid() != 0 {
            return refuse(format!(
                "{} is a symlink owned by uid {}, not by this user (uid {me}) or root",
                at.display(),
                meta.uid()
            ));
        }
        let target = std::fs::read_link(&at)?;
        at = match at.parent() {
            Some(parent) => parent.join(target),
            None => target,
        };
    }
    let meta = std::fs::symlink_metadata(&at)?;
    if !meta.is_dir() {
        return refuse(format!("{} is not a directory", at.display()));
    }
    if meta.uid() != me {
        return refuse(format!(
            "the directory is owned by uid {}, not by this user (uid {me}); remove it or choose \
             a directory of this user's",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return refuse(format!(
            "the directory may be written by its group or others (mode {mode:04o}); \
             make it private (chmod 700) or choose another"
        ));
    }
    Ok(())
}

/// Writes a file atomically: into a new temporary file beside it, then renamed over it. The
/// temporary file has a random name and is created exclusively without following symlinks
/// ([`create_new`]), so a file or symlink planted in a shared directory (the default `--cert-dir`
/// is under /tmp) can neither be written through nor make the write fail by a name guessed in
/// advance; private files are created with mode 0600, so the key is never readable by others,
/// not even before the rename. A symlink at `path` itself is replaced, not followed.
pub fn write_file(path: &Path, content: &[u8], private: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let tmp = path.with_file_name(tmp_name);
    let written = create_new(&tmp, private).and_then(|mut f| {
        f.write_all(content)?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Creates `path` for writing: only if nothing (not even a dangling symlink) is there
/// (`O_CREAT|O_EXCL`), never through a symlink (`O_NOFOLLOW`), with mode 0600 when `private`,
/// else 0644 (less what the umask takes away).
pub fn create_new(path: &Path, private: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::UnixTime;

    #[test]
    fn generated_bundle_is_a_valid_serving_certificate_for_the_service_names() {
        let names = service_dns_names("sites-operator-webhook", "sites");
        assert_eq!(names[3], "sites-operator-webhook.sites.svc.cluster.local");
        let mut all = names.clone();
        all.push("127.0.0.1".into());
        let b = generate(&all, 30).unwrap();
        let ck = crate::tls::certified_key(
            Path::new("tls.crt"),
            b.cert_pem.as_bytes(),
            Path::new("tls.key"),
            b.key_pem.as_bytes(),
            UnixTime::now(),
        )
        .expect("key matches and the certificate is valid now");
        let (_, leaf) = x509_parser::parse_x509_certificate(ck.end_entity_cert().unwrap()).unwrap();
        let sans = leaf.subject_alternative_name().unwrap().unwrap();
        let text = format!("{:?}", sans.value.general_names);
        for n in &names {
            assert!(text.contains(n), "{n} in {text}");
        }
        assert!(text.contains("IPAddress([127, 0, 0, 1])"), "{text}");
        let roots = {
            let dir = std::env::temp_dir().join(format!("certs-{}", uuid::Uuid::new_v4()));
            b.write(&dir).unwrap();
            let roots = crate::tls::load_roots(&dir.join(CA_FILE)).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::metadata(dir.join(KEY_FILE))
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o600);
            }
            std::fs::remove_dir_all(&dir).unwrap();
            roots
        };
        assert_eq!(roots.len(), 1);
        assert!(!format!("{b:?}").contains("PRIVATE KEY"));
    }

    /// Another user's uid, and whether this process may give files to it (as root).
    #[cfg(unix)]
    fn other_user() -> (u32, bool) {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        (if me == 65534 { 65533 } else { 65534 }, me == 0)
    }

    /// The certificate directory is this user's alone: created private, and an existing one
    /// that another user owns or may write to is refused, also behind a symlink.
    #[cfg(unix)]
    #[test]
    fn certificates_are_written_only_into_a_directory_no_one_else_controls() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let base = std::env::temp_dir().join(format!("certs-{}", uuid::Uuid::new_v4()));
        let b = generate(&["localhost".to_string()], 30).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let refused = |dir: &Path, want: &str| {
            let e = b.write(dir).unwrap_err().to_string();
            assert!(e.contains(want), "{}: {e}", dir.display());
            assert!(!dir.join(KEY_FILE).exists(), "{}: written", dir.display());
        };

        // Missing: created with mode 0700, its missing parents too.
        let fresh = base.join("a").join("certs");
        b.write(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);
        b.write(&fresh).unwrap();
        // Existing and private: used as it is (readable by others, say).
        let readable = base.join("readable");
        std::fs::create_dir(&readable).unwrap();
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o755)).unwrap();
        b.write(&readable).unwrap();
        assert_eq!(mode(&readable), 0o755, "not changed");

        // Writable by others, or by the group, even with the sticky bit of /tmp.
        for open in [0o777, 0o770, 0o1777] {
            let dir = base.join(format!("open-{open:o}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(open)).unwrap();
            refused(&dir, &format!("mode {open:04o}"));
            assert_eq!(mode(&dir), open, "not changed");
        }
        // A file, not a directory.
        let file = base.join("file");
        std::fs::write(&file, "").unwrap();
        refused(&file, "not a directory");

        // Another user's directory, directly and behind this user's symlink; this user's
        // directory behind another user's symlink. (Only root can make these; otherwise `/`
        // stands for another user's directory.)
        let (other, root) = other_user();
        let mine = base.join("mine");
        std::fs::create_dir(&mine).unwrap();
        let through_mine = base.join("link-to-theirs");
        if root {
            let theirs = base.join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(other), Some(other)).unwrap();
            refused(&theirs, &format!("owned by uid {other}"));
            symlink(&theirs, &through_mine).unwrap();
            let planted = base.join("planted-link");
            symlink(&mine, &planted).unwrap();
            std::os::unix::fs::lchown(&planted, Some(other), Some(other)).unwrap();
            refused(&planted, &format!("symlink owned by uid {other}"));
        } else {
            refused(Path::new("/"), "owned by uid 0");
            symlink("/", &through_mine).unwrap();
        }
        refused(&through_mine, "owned by uid");
        // This user's symlinks to this user's directory are followed, a chain of them too.
        let link = base.join("link");
        symlink(&mine, &link).unwrap();
        let chain = base.join("chain");
        symlink("link", &chain).unwrap();
        b.write(&chain).unwrap();
        assert!(mine.join(KEY_FILE).is_file());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn files_are_written_through_a_new_private_file_that_follows_no_symlink() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let dir = std::env::temp_dir().join(format!("certs-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "victim").unwrap();
        let key = dir.join(KEY_FILE);
        // Symlinks planted where a predictable temporary file would be (the name the previous
        // version used, `tls.tmp-<pid>`), and at the destination itself.
        symlink(
            &victim,
            key.with_extension(format!("tmp-{}", std::process::id())),
        )
        .unwrap();
        symlink(&victim, &key).unwrap();
        write_file(&key, b"secret", true).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
        let meta = std::fs::symlink_metadata(&key).unwrap();
        assert!(meta.file_type().is_file(), "the symlink is replaced");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "secret");
        // Written again over a regular file; no temporary file is left behind.
        write_file(&key, b"again", true).unwrap();
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "again");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let planted = format!("tls.tmp-{}", std::process::id());
        assert_eq!(left, [KEY_FILE, planted.as_str(), "victim"]);

        // The temporary file is created exclusively and never through a symlink, dangling or not.
        let at = dir.join("new");
        symlink(dir.join("nowhere"), &at).unwrap();
        let e = create_new(&at, true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert!(!dir.join("nowhere").exists());
        std::fs::remove_file(&at).unwrap();
        symlink(&victim, &at).unwrap();
        assert!(create_new(&at, true).is_err());
        std::fs::remove_file(&at).unwrap();
        std::fs::write(&at, "there").unwrap();
        let e = create_new(&at, true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
        std::fs::remove_file(&at).unwrap();
        let f = create_new(&at, true).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
