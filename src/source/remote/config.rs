//! Remote-store configuration: the options (`remote_timeout`, `remote_cache`, anonymous access)
//! and the `object_store` client built from the standard environment, the way the AWS and
//! Google command lines are configured.
//!
//! S3, in this order:
//! 1. anonymous: [`RemoteConfig::anonymous`] or `AWS_SKIP_SIGNATURE=true` (unsigned requests);
//! 2. `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`);
//! 3. the profile `AWS_PROFILE` (else `default`) in `~/.aws/credentials` / `~/.aws/config`
//!    (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`), see [`super::aws_profile`];
//! 4. web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`), container credentials
//!    (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` / `_FULL_URI`), handled by `object_store`;
//! 5. the instance metadata service, unless `AWS_EC2_METADATA_DISABLED=true` (then: a one-line
//!    error naming all of the above). `AWS_EC2_METADATA_SERVICE_ENDPOINT` moves it.
//!
//! Region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's, else `us-east-1`. Endpoint
//! (S3-compatible stores): `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's; an
//! `http://` endpoint is allowed plain HTTP, and is addressed path-style.
//!
//! GCS, in this order: anonymous ([`RemoteConfig::anonymous`] or `GOOGLE_SKIP_SIGNATURE=true`);
//! `STORAGE_EMULATOR_HOST` (an emulator, no auth); `GOOGLE_APPLICATION_CREDENTIALS` (or
//! `GOOGLE_SERVICE_ACCOUNT`): a service-account key, which may carry `gcs_base_url` and
//! `disable_oauth: true` for an emulator, or an authorized-user file; gcloud's
//! `~/.config/gcloud/application_default_credentials.json`; the metadata server, unless
//! `NO_GCE_CHECK=true` (then: the one-line error).
//!
//! HTTP(S): no credentials.
//!
//! All: `HTTPS_PROXY` / `HTTP_PROXY` (and `NO_PROXY`), upper or lower case.
//!
//! Every request is bounded: connect timeout 5 s, request timeout and retry budget
//! `remote_timeout`, and every operation is also wrapped in `remote_timeout` by the callers.

pub(crate) use super::env::Env;
use crate::error::io_words;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::list::PaginatedListStore;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

use crate::source::remote::url::{RemoteUrl, Scheme};
use crate::source::remote::{aws_profile, RemoteError};

/// Default bound on one operation, retries included (`remote_timeout`).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default memory budget for read-ahead and cached parts (`remote_cache`).
pub(crate) const DEFAULT_CACHE: u64 = 256 << 20;
/// Default read-ahead of one reader: GETs in flight (`remote_parallel`) of this many bytes
/// each (`remote_part`).
pub(crate) const DEFAULT_PARALLEL: usize = 8;
pub(crate) const DEFAULT_PART: u64 = 8 << 20;

/// The environment variables that set `cache_dir` and `cache_max`'s defaults.
pub(crate) const CACHE_DIR_ENV: &str = "TFMOUNT_CACHE_DIR";
pub(crate) const CACHE_MAX_ENV: &str = "TFMOUNT_CACHE_MAX";

/// Options of the remote stores.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// Longest time one operation (a HEAD, a listing, one read) may take, retries included,
    /// before it fails (`remote_timeout`).
    pub timeout: Duration,
    /// Memory budget shared by all read-ahead and cached parts of one store (`remote_cache`).
    pub cache_bytes: u64,
    /// Unsigned requests (public buckets): no credentials looked for.
    pub anonymous: bool,
    /// Where credentials and endpoints are read from.
    pub env: Env,
    /// The persistent disk cache's directory (`cache_dir`, `TFMOUNT_CACHE_DIR`) and bound
    /// (`cache_max`, `TFMOUNT_CACHE_MAX`; `None`: see [`super::disk`]).
    pub cache_dir: Option<PathBuf>,
    /// The disk cache's bound in bytes.
    pub cache_max: Option<u64>,
    /// Read-ahead of one reader: `parallel` GETs of `part` bytes in flight at most
    /// (`remote_parallel`, `remote_part`).
    pub parallel: usize,
    /// Bytes of one read-ahead GET.
    pub part: u64,
    /// The object read-ahead of the disk cache (reads going through an object in order fetch
    /// the next window of it, whatever tensor it holds): off for `tfmount warm KEY...`, which
    /// fetches only what it names.
    pub object_read_ahead: bool,
}

impl Default for RemoteConfig {
    /// Default options and an empty environment.
    fn default() -> Self {
        RemoteConfig {
            timeout: DEFAULT_TIMEOUT,
            cache_bytes: DEFAULT_CACHE,
            anonymous: false,
            env: Env::default(),
            cache_dir: None,
            cache_max: None,
            parallel: DEFAULT_PARALLEL,
            part: DEFAULT_PART,
            object_read_ahead: true,
        }
    }
}

impl RemoteConfig {
    /// Default options and the process environment.
    pub(crate) fn from_env() -> Self {
        let env = Env::from_process();
        let cache_dir = default_cache_dir(&env);
        let cache_max = env.get(CACHE_MAX_ENV).and_then(|v| {
            let n = parse_size(v);
            if n.is_none() {
                log::warn!("{CACHE_MAX_ENV}={v:?}: not a size like 64G; ignored");
            }
            n
        });
        RemoteConfig {
            env,
            cache_dir,
            cache_max,
            ..Default::default()
        }
    }
}

/// The disk cache a remote SOURCE gets when no `cache_dir` option is given: `$TFMOUNT_CACHE_DIR`
/// (`none`: no disk cache), else `$XDG_CACHE_HOME/tfmount`, else `$HOME/.cache/tfmount` (the
/// XDG base directory rule; a relative `XDG_CACHE_HOME` is ignored, as the rule says), else none.
pub(crate) fn default_cache_dir(env: &Env) -> Option<PathBuf> {
    if let Some(d) = env.get(CACHE_DIR_ENV) {
        return (d != "none").then(|| PathBuf::from(d));
    }
    if let Some(x) = env.get("XDG_CACHE_HOME").filter(|x| x.starts_with('/')) {
        return Some(Path::new(x).join("tfmount"));
    }
    env.get("HOME")
        .filter(|h| h.starts_with('/'))
        .map(|h| Path::new(h).join(".cache/tfmount"))
}

/// `256M`, `1G`, `512K`, `1048576` (bytes; suffixes are powers of 1024, an optional trailing
/// `B`/`iB` is accepted).
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.as_bytes().last()? {
        b'k' | b'K' => (&t[..t.len() - 1], 10),
        b'm' | b'M' => (&t[..t.len() - 1], 20),
        b'g' | b'G' => (&t[..t.len() - 1], 30),
        b't' | b'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// `60`, `60s`, `500ms`, `2m`: a duration (plain numbers are seconds).
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let t = s.trim();
    if let Some(n) = t.strip_suffix("ms") {
        return n.trim().parse().ok().map(Duration::from_millis);
    }
    if let Some(n) = t.strip_suffix('m') {
        return n
            .trim()
            .parse::<u64>()
            .ok()?
            .checked_mul(60)
            .map(Duration::from_secs);
    }
    let n = t.strip_suffix('s').unwrap_or(t);
    n.trim().parse().ok().map(Duration::from_secs)
}

/// The client options and retry policy every store gets.
fn client_options(cfg: &RemoteConfig, allow_http: bool) -> (ClientOptions, RetryConfig) {
    let connect = cfg.timeout.min(Duration::from_secs(5));
    let mut opts = ClientOptions::new()
        .with_timeout(cfg.timeout)
        .with_connect_timeout(connect)
        .with_allow_http(allow_http);
    if let Some(roots) = system_roots() {
        opts = opts.with_no_system_certificates(true);
        for der in roots {
            if let Ok(c) = object_store::Certificate::from_der(der) {
                opts = opts.with_root_certificate(c);
            }
        }
    }
    if let Some((p, no)) = proxy(&cfg.env) {
        opts = opts.with_proxy_url(p);
        if let Some(no) = no {
            opts = opts.with_proxy_excludes(no);
        }
    }
    // Retries stop at half of `remote_timeout`, and no wait between two is longer than an
    // eighth of it, so that an operation that keeps failing the same way (a refused
    // connection) ends with that error in words, at most five eighths of the timeout in, rather
    // than racing the overall timeout and reporting "timed out". (Retries stopping at three
    // quarters, with object_store's random backoff of up to 15 s, could still be sleeping when
    // the timeout fired: a flaky "timed out after 10s" where "connection refused" was meant.)
    let retry = RetryConfig {
        retry_timeout: cfg.timeout / 2,
        backoff: object_store::BackoffConfig {
            max_backoff: (cfg.timeout / 8).max(Duration::from_millis(100)),
            ..Default::default()
        },
        ..Default::default()
    };
    (opts, retry)
}

/// The system's root certificates, loaded once per process, where the platform's verifier is
/// WebPKI over them anyway (Linux: `SSL_CERT_FILE` / `SSL_CERT_DIR`, else the distribution's
/// bundle, as `rustls-platform-verifier` finds them): every client of a mount (the store's, the
/// directory probe's, a credential provider's) would otherwise load and parse them again,
/// 15-20 ms each, most of a warm mount's time. Duplicates (the bundle and the directory hold
/// the same certificates) and certificates WebPKI cannot use are left out, as the platform's
/// verifier leaves them. `None` (each client loads them itself) elsewhere, or when none load.
fn system_roots() -> Option<&'static [Vec<u8>]> {
    #[cfg(target_os = "linux")]
    {
        static ROOTS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
        let roots = ROOTS.get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                log::warn!("loading the system's CA root certificates: {e}");
            }
            let mut seen = std::collections::HashSet::new();
            found
                .certs
                .into_iter()
                .filter(|c| seen.insert(c.to_vec()))
                .filter(|c| rustls::RootCertStore::empty().add(c.clone()).is_ok())
                .map(|c| c.to_vec())
                .collect()
        });
        if !roots.is_empty() {
            return Some(roots);
        }
    }
    None
}

/// The proxy from `HTTPS_PROXY` / `HTTP_PROXY`, and `NO_PROXY`.
fn proxy(env: &Env) -> Option<(&str, Option<&str>)> {
    let var = |k: &str| env.get(k).or(env.get(&k.to_ascii_lowercase()));
    let p = var("HTTPS_PROXY").or(var("HTTP_PROXY"))?;
    Some((p, var("NO_PROXY")))
}

/// The plain client that tells directories over HTTP (a HEAD of `path/`).
fn http_probe_client(cfg: &RemoteConfig) -> reqwest::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .timeout(cfg.timeout)
        .connect_timeout(cfg.timeout.min(Duration::from_secs(5)));
    if let Some(roots) = system_roots() {
        b = b.tls_certs_only(
            roots
                .iter()
                .filter_map(|der| reqwest::Certificate::from_der(der).ok()),
        );
    }
    if let Some((p, no)) = proxy(&cfg.env) {
        let mut px = reqwest::Proxy::all(p)?;
        if let Some(no) = no {
            px = px.no_proxy(reqwest::NoProxy::from_string(no));
        }
        b = b.proxy(px);
    }
    b.build()
}

/// rustls needs a process-wide crypto provider (reqwest is built without a bundled one).
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider is already installed: that one serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// An `object_store` client for `url`'s bucket or host, and a description of the credentials
/// it uses (for messages).
pub(crate) struct Built {
    pub(crate) store: Arc<dyn ObjectStore>,
    /// Listing page by page (S3, GCS).
    pub(crate) lister: Option<Arc<dyn PaginatedListStore>>,
    /// Plain HTTP: the client that asks whether `path/` is a directory.
    pub(crate) dir_probe: Option<reqwest::Client>,
    pub(crate) credentials: String,
}

/// Builds the client for `url` from `cfg`. Fails (one line, naming what was looked for) when
/// no credentials can be found; never waits on the network.
pub(crate) fn build(url: &RemoteUrl, cfg: &RemoteConfig) -> Result<Built, RemoteError> {
    install_tls_provider();
    match url.scheme {
        Scheme::S3 => build_s3(url, cfg),
        Scheme::Gcs => build_gcs(url, cfg),
        Scheme::Http => {
            let (opts, retry) = client_options(cfg, url.bucket.starts_with("http://"));
            let store = HttpBuilder::new()
                .with_url(format!("{}/", url.bucket))
                .with_client_options(opts)
                .with_retry(retry)
                .build()
                .map_err(|e| RemoteError::Config(format!("{}: {e}", url.store_prefix())))?;
            let probe = http_probe_client(cfg)
                .map_err(|e| RemoteError::Config(format!("{}: {e}", url.store_prefix())))?;
            Ok(Built {
                store: Arc::new(store),
                lister: None,
                dir_probe: Some(probe),
                credentials: "none (plain HTTP)".into(),
            })
        }
    }
}

fn build_s3(url: &RemoteUrl, cfg: &RemoteConfig) -> Result<Built, RemoteError> {
    let env = &cfg.env;
    let fail = |m: String| RemoteError::Config(format!("{}: {m}", url.store_prefix()));
    let anonymous = cfg.anonymous || env.flag("AWS_SKIP_SIGNATURE");
    let keys = env_keys(env).map_err(fail)?;
    // The profile is read even with keys in the environment: it may give region or endpoint.
    let profile = aws_profile::load(env).map_err(fail)?;
    let region = s3_region(env, profile.as_ref());
    let endpoint = s3_endpoint(env, profile.as_ref());
    let plain_http = endpoint.as_deref().is_some_and(|e| {
        e.get(..7)
            .is_some_and(|h| h.eq_ignore_ascii_case("http://"))
    });
    let (opts, retry) = client_options(cfg, plain_http);
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(&url.bucket)
        .with_region(&region)
        .with_client_options(opts)
        .with_retry(retry);
    if let Some(e) = &endpoint {
        b = b.with_endpoint(e.trim_end_matches('/'));
    }
    let credentials;
    if anonymous {
        b = b.with_skip_signature(true);
        credentials = "anonymous (unsigned requests)".to_string();
    } else {
        let found;
        (found, credentials) = find_s3_credentials(env, keys, profile.as_ref()).map_err(fail)?;
        b = found.apply(b);
    }
    let store = Arc::new(b.build().map_err(|e| fail(e.to_string()))?);
    Ok(Built {
        store: store.clone(),
        lister: Some(store),
        dir_probe: None,
        credentials,
    })
}

/// An access key: its id, its secret and a session token.
type AccessKey<'e> = (String, String, Option<&'e str>);

/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) if set; an error
/// when only one of the first two is.
fn env_keys(env: &Env) -> Result<Option<AccessKey<'_>>, String> {
    match (
        env.get("AWS_ACCESS_KEY_ID"),
        env.get("AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(k), Some(s)) => Ok(Some((
            k.to_string(),
            s.to_string(),
            env.get("AWS_SESSION_TOKEN"),
        ))),
        (Some(_), None) => Err("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into()),
        (None, Some(_)) => Err("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into()),
        (None, None) => Ok(None),
    }
}

/// The S3 region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's, else `us-east-1`.
fn s3_region(env: &Env, profile: Option<&aws_profile::Profile>) -> String {
    env.get("AWS_REGION")
        .or(env.get("AWS_DEFAULT_REGION"))
        .map(str::to_string)
        .or_else(|| profile.and_then(|p| p.region.clone()))
        .unwrap_or_else(|| "us-east-1".into())
}

/// The S3 endpoint, if not AWS's: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, the profile's.
fn s3_endpoint(env: &Env, profile: Option<&aws_profile::Profile>) -> Option<String> {
    env.get("AWS_ENDPOINT_URL_S3")
        .or(env.get("AWS_ENDPOINT_URL"))
        .map(str::to_string)
        .or_else(|| profile.and_then(|p| p.endpoint_url.clone()))
}

/// The credentials S3 requests are signed with (anonymous access aside).
enum S3Credentials<'e> {
    /// An access key, from the environment or a profile.
    Keys {
        id: String,
        secret: String,
        token: Option<String>,
    },
    /// Web identity, with the optional role session name and STS endpoint.
    WebIdentity {
        token_file: &'e str,
        role: &'e str,
        session_name: Option<&'e str>,
        sts_endpoint: Option<&'e str>,
    },
    /// Container credentials at `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
    ContainerRelative(&'e str),
    /// Container credentials at `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
    ContainerFull { uri: &'e str, token_file: &'e str },
    /// The instance metadata service, at `endpoint` if moved.
    InstanceMetadata { endpoint: Option<&'e str> },
}

/// The first S3 credentials found, in the module doc's order after anonymous access, and
/// their description; an error when a profile's cannot be used, or when there are none and
/// instance metadata is disabled.
fn find_s3_credentials<'e>(
    env: &'e Env,
    keys: Option<AccessKey<'e>>,
    profile: Option<&aws_profile::Profile>,
) -> Result<(S3Credentials<'e>, String), String> {
    if let Some((id, secret, token)) = keys {
        let token = token.map(str::to_string);
        let said = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY".to_string();
        return Ok((S3Credentials::Keys { id, secret, token }, said));
    }
    if let Some(p) = profile.filter(|p| p.access_key_id.is_some() || p.secret_access_key.is_some())
    {
        let (Some(id), Some(secret)) = (&p.access_key_id, &p.secret_access_key) else {
            return Err(format!(
                "{} has only one of aws_access_key_id and aws_secret_access_key",
                p.source
            ));
        };
        let keys = S3Credentials::Keys {
            id: id.clone(),
            secret: secret.clone(),
            token: p.session_token.clone(),
        };
        return Ok((keys, p.source.clone()));
    }
    if let Some(p) = profile.filter(|p| p.unsupported.is_some()) {
        return Err(format!(
            "{} gets its credentials through `{}`, which tfmount does not follow; export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN (e.g. `aws configure export-credentials --format env`)",
            p.source,
            p.unsupported.as_deref().unwrap_or("?")
        ));
    }
    if let (Some(token_file), Some(role)) = (
        env.get("AWS_WEB_IDENTITY_TOKEN_FILE"),
        env.get("AWS_ROLE_ARN"),
    ) {
        let web = S3Credentials::WebIdentity {
            token_file,
            role,
            session_name: env.get("AWS_ROLE_SESSION_NAME"),
            sts_endpoint: env.get("AWS_ENDPOINT_URL_STS"),
        };
        let said = "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)".to_string();
        return Ok((web, said));
    }
    if let Some(uri) = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        let said = "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)".to_string();
        return Ok((S3Credentials::ContainerRelative(uri), said));
    }
    if let (Some(uri), Some(token_file)) = (
        env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
        env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
    ) {
        let said = "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI)".to_string();
        return Ok((S3Credentials::ContainerFull { uri, token_file }, said));
    }
    instance_metadata(env)
}

/// The last resort: the instance metadata service; unless it is disabled, then an error
/// naming everything looked for.
fn instance_metadata(env: &Env) -> Result<(S3Credentials<'_>, String), String> {
    let (creds_file, conf_file) = aws_profile::files(env);
    let looked = format!(
        "looked for AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, profile `{}` in {} and {}, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_*",
        env.get("AWS_PROFILE").unwrap_or("default"),
        creds_file.display(),
        conf_file.display()
    );
    if env.flag("AWS_EC2_METADATA_DISABLED") {
        return Err(format!(
            "no AWS credentials: {looked}, and instance metadata is disabled (AWS_EC2_METADATA_DISABLED); for a public bucket use anonymous access (AWS_SKIP_SIGNATURE=true)"
        ));
    }
    let endpoint = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    Ok((
        S3Credentials::InstanceMetadata { endpoint },
        format!("instance metadata (none in the environment: {looked})"),
    ))
}

impl S3Credentials<'_> {
    /// `b` set to sign its requests with these credentials.
    fn apply(self, b: AmazonS3Builder) -> AmazonS3Builder {
        match self {
            S3Credentials::Keys { id, secret, token } => {
                let b = b.with_access_key_id(id).with_secret_access_key(secret);
                match token {
                    Some(t) => b.with_token(t),
                    None => b,
                }
            }
            S3Credentials::WebIdentity {
                token_file,
                role,
                session_name,
                sts_endpoint,
            } => {
                let mut b = b
                    .with_config(AmazonS3ConfigKey::WebIdentityTokenFile, token_file)
                    .with_config(AmazonS3ConfigKey::RoleArn, role);
                if let Some(v) = session_name {
                    b = b.with_config(AmazonS3ConfigKey::RoleSessionName, v);
                }
                if let Some(v) = sts_endpoint {
                    b = b.with_config(AmazonS3ConfigKey::StsEndpoint, v);
                }
                b
            }
            S3Credentials::ContainerRelative(uri) => {
                b.with_config(AmazonS3ConfigKey::ContainerCredentialsRelativeUri, uri)
            }
            S3Credentials::ContainerFull { uri, token_file } => b
                .with_config(AmazonS3ConfigKey::ContainerCredentialsFullUri, uri)
                .with_config(
                    AmazonS3ConfigKey::ContainerAuthorizationTokenFile,
                    token_file,
                ),
            S3Credentials::InstanceMetadata { endpoint } => match endpoint {
                Some(ep) => b.with_metadata_endpoint(ep.trim_end_matches('/')),
                None => b,
            },
        }
    }
}

/// The `"type"` of a Google credentials JSON file (`service_account`, `authorized_user`, ...).
fn credentials_type(path: &Path) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{}: {}", path.display(), io_words(&e)))?;
    if meta.len() > 1 << 20 {
        return Err(format!(
            "{}: too large for a credentials file",
            path.display()
        ));
    }
    let text = std::fs::read(path).map_err(|e| format!("{}: {}", path.display(), io_words(&e)))?;
    let v: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{}: not a credentials JSON file: {e}", path.display()))?;
    Ok(v.get("type")
        .and_then(|t| t.as_str())
        .unwrap_or("")
        .to_string())
}

fn build_gcs(url: &RemoteUrl, cfg: &RemoteConfig) -> Result<Built, RemoteError> {
    let env = &cfg.env;
    let fail = |m: String| RemoteError::Config(format!("{}: {m}", url.store_prefix()));
    let emulator = env.get("STORAGE_EMULATOR_HOST").map(|h| {
        if h.contains("://") {
            h.trim_end_matches('/').to_string()
        } else {
            format!("http://{}", h.trim_end_matches('/'))
        }
    });
    let key_file = env
        .get("GOOGLE_APPLICATION_CREDENTIALS")
        .or(env.get("GOOGLE_SERVICE_ACCOUNT"))
        .map(PathBuf::from);
    // A service-account key may point at an emulator (`gcs_base_url`): allow plain HTTP then.
    let mut allow_http = emulator
        .as_deref()
        .is_some_and(|e| e.starts_with("http://"));
    let mut key_type = None;
    if let Some(p) = &key_file {
        let t = credentials_type(p).map_err(fail)?;
        if t == "service_account" {
            let text = std::fs::read_to_string(p)
                .map_err(|e| fail(format!("{}: {}", p.display(), io_words(&e))))?;
            allow_http |= text.contains("\"http://");
        }
        key_type = Some(t);
    }
    let (opts, retry) = client_options(cfg, allow_http);
    let mut b = GoogleCloudStorageBuilder::new()
        .with_bucket_name(&url.bucket)
        .with_client_options(opts)
        .with_retry(retry);
    let credentials;
    if cfg.anonymous || env.flag("GOOGLE_SKIP_SIGNATURE") {
        b = b.with_skip_signature(true);
        if let Some(e) = &emulator {
            b = b.with_base_url(e);
        }
        credentials = "anonymous (unsigned requests)".to_string();
    } else if let Some(e) = &emulator {
        b = b.with_base_url(e).with_skip_signature(true);
        credentials = format!("none (emulator at STORAGE_EMULATOR_HOST={e})");
    } else if let (Some(p), Some(t)) = (&key_file, &key_type) {
        let ps = p.display().to_string();
        b = match t.as_str() {
            "service_account" => b.with_service_account_path(&ps),
            "authorized_user" => b.with_application_credentials(&ps),
            other => {
                return Err(fail(format!(
                    "{ps} (GOOGLE_APPLICATION_CREDENTIALS) has credentials of type `{other}`; tfmount reads `service_account` and `authorized_user` files"
                )))
            }
        };
        credentials = format!("{ps} (GOOGLE_APPLICATION_CREDENTIALS)");
    } else {
        let adc = env
            .home()
            .join(".config/gcloud/application_default_credentials.json");
        if adc.is_file() {
            let t = credentials_type(&adc).map_err(fail)?;
            let ps = adc.display().to_string();
            b = match t.as_str() {
                "service_account" => b.with_service_account_path(&ps),
                _ => b.with_application_credentials(&ps),
            };
            credentials = format!("{ps} (gcloud application-default credentials)");
        } else if env.flag("NO_GCE_CHECK") {
            return Err(fail(format!(
                "no Google Cloud credentials: looked for GOOGLE_APPLICATION_CREDENTIALS, {}, STORAGE_EMULATOR_HOST, and the metadata server is disabled (NO_GCE_CHECK); for a public bucket use anonymous access (GOOGLE_SKIP_SIGNATURE=true)",
                adc.display()
            )));
        } else {
            credentials = format!(
                "the metadata server (none in the environment: looked for GOOGLE_APPLICATION_CREDENTIALS, {})",
                adc.display()
            );
        }
    }
    let store = Arc::new(b.build().map_err(|e| fail(e.to_string()))?);
    Ok(Built {
        store: store.clone(),
        lister: Some(store),
        dir_probe: None,
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::super::url::parse;
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> RemoteConfig {
        RemoteConfig {
            env: Env::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
            ..Default::default()
        }
    }

    fn err(url: &str, c: &RemoteConfig) -> String {
        match build(&parse(url).unwrap(), c) {
            Ok(b) => panic!("{url}: built with {}", b.credentials),
            Err(e) => e.to_string(),
        }
    }

    fn creds(url: &str, c: &RemoteConfig) -> String {
        match build(&parse(url).unwrap(), c) {
            Ok(b) => b.credentials,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("16k"), Some(16 << 10));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999T"), None);
        assert_eq!(parse_duration("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn missing_credentials_are_one_line_errors() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().to_str().unwrap();
        let e = err(
            "s3://b/k",
            &cfg(&[("HOME", h), ("AWS_EC2_METADATA_DISABLED", "true")]),
        );
        assert!(!e.contains('\n'), "{e}");
        for what in [
            "s3://b/",
            "AWS_ACCESS_KEY_ID",
            "profile `default`",
            ".aws/credentials",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_EC2_METADATA_DISABLED",
        ] {
            assert!(e.contains(what), "{what} not in: {e}");
        }
        let e = err("gs://b/k", &cfg(&[("HOME", h), ("NO_GCE_CHECK", "1")]));
        assert!(!e.contains('\n'), "{e}");
        for what in [
            "gs://b/",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "application_default_credentials.json",
        ] {
            assert!(e.contains(what), "{what} not in: {e}");
        }
        let e = err("s3://b/k", &cfg(&[("AWS_ACCESS_KEY_ID", "a")]));
        assert!(e.contains("AWS_SECRET_ACCESS_KEY"), "{e}");
        let e = err("s3://b", &cfg(&[("HOME", h), ("AWS_PROFILE", "missing")]));
        assert!(e.contains("`missing`"), "{e}");
        let e = err(
            "gs://b",
            &cfg(&[("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")]),
        );
        assert!(e.contains("/nonexistent/key.json"), "{e}");
    }

    #[test]
    fn credential_sources_in_order() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().to_str().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id=A\naws_secret_access_key=S\n",
        )
        .unwrap();
        let c = cfg(&[("HOME", h), ("AWS_EC2_METADATA_DISABLED", "true")]);
        assert!(creds("s3://b", &c).contains("profile `default`"));
        let c = cfg(&[
            ("HOME", h),
            ("AWS_ACCESS_KEY_ID", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y"),
        ]);
        assert!(creds("s3://b", &c).starts_with("AWS_ACCESS_KEY_ID"));
        let mut c = cfg(&[("HOME", h)]);
        c.anonymous = true;
        assert!(creds("s3://b", &c).starts_with("anonymous"));
        assert!(creds("gs://b", &c).starts_with("anonymous"));
        let c = cfg(&[("AWS_SKIP_SIGNATURE", "true")]);
        assert!(creds("s3://b", &c).starts_with("anonymous"));
        let c = cfg(&[("STORAGE_EMULATOR_HOST", "127.0.0.1:1")]);
        assert!(creds("gs://b", &c).contains("emulator"));
        // A fake-gcs-server style service-account key.
        let key = home.path().join("sa.json");
        std::fs::write(
            &key,
            r#"{"type":"service_account","gcs_base_url":"http://127.0.0.1:1","disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}"#,
        )
        .unwrap();
        let c = cfg(&[("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().unwrap())]);
        assert!(creds("gs://b", &c).contains("sa.json"));
        // https stores build (the TLS provider is installed).
        assert_eq!(
            creds("https://example.invalid/x", &cfg(&[])),
            "none (plain HTTP)"
        );
    }

    /// The default disk cache: TFMOUNT_CACHE_DIR (`none`: off), else XDG_CACHE_HOME/tfmount
    /// (absolute only, as the XDG rule says), else HOME/.cache/tfmount, else none.
    #[test]
    fn the_default_cache_directory() {
        let d = |pairs: &[(&str, &str)]| default_cache_dir(&cfg(pairs).env);
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(d(&[("HOME", "/home/u")]), p("/home/u/.cache/tfmount"));
        assert_eq!(
            d(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x/cache")]),
            p("/x/cache/tfmount")
        );
        assert_eq!(
            d(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "rel/cache")]),
            p("/home/u/.cache/tfmount")
        );
        assert_eq!(
            d(&[("HOME", "/home/u"), ("TFMOUNT_CACHE_DIR", "/fast/c")]),
            p("/fast/c")
        );
        assert_eq!(
            d(&[("HOME", "/home/u"), ("TFMOUNT_CACHE_DIR", "none")]),
            None
        );
        assert_eq!(d(&[]), None);
        assert_eq!(d(&[("HOME", "relative")]), None);
    }
}
