//! AWS named profiles: the `[NAME]` section of `~/.aws/credentials` and the `[profile NAME]`
//! (or `[default]`) section of `~/.aws/config`, as the AWS command line reads them.
//! `object_store` does not read these files, and users expect `AWS_PROFILE` to work.
//!
//! Read: `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`, `region`,
//! `endpoint_url`, and `endpoint_url` in a nested `s3 =` block. Profiles that get their
//! credentials some other way (`role_arn`, `credential_process`, `sso_*`) are reported as such,
//! not followed. Files are read whole up to 1 MiB; anything larger is refused.

use crate::error::io_words;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::source::remote::env::Env;

/// What a profile holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Profile {
    pub(crate) name: String,
    pub(crate) access_key_id: Option<String>,
    pub(crate) secret_access_key: Option<String>,
    pub(crate) session_token: Option<String>,
    pub(crate) region: Option<String>,
    pub(crate) endpoint_url: Option<String>,
    /// A setting that gets credentials in a way this reader does not follow (`role_arn`, ...).
    pub(crate) unsupported: Option<String>,
    /// Where it was found, for messages.
    pub(crate) source: String,
}

const MAX_FILE: u64 = 1 << 20;

/// The `(section, key) -> value` pairs of an INI file; a nested block (`s3 =` followed by
/// indented `key = value` lines) gives keys `s3.key`.
fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section: Option<String> = None;
    let mut parent: Option<String> = None;
    for raw in text.lines() {
        let indented = raw.starts_with([' ', '\t']);
        let line = raw.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.split_whitespace().collect::<Vec<_>>().join(" "));
            parent = None;
            continue;
        }
        let Some(sec) = &section else { continue };
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        let key = match (&parent, indented) {
            (Some(p), true) => format!("{p}.{k}"),
            _ => {
                parent = v.is_empty().then(|| k.clone());
                k
            }
        };
        if !v.is_empty() {
            out.entry(sec.clone())
                .or_default()
                .insert(key, v.to_string());
        }
    }
    out
}

fn read_small(path: &Path) -> Result<Option<String>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {}", path.display(), io_words(&e))),
    };
    if meta.len() > MAX_FILE {
        return Err(format!(
            "{}: {} bytes, more than an AWS configuration file has",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read(path)
        .map(|b| Some(String::from_utf8_lossy(&b).into_owned()))
        .map_err(|e| format!("{}: {}", path.display(), io_words(&e)))
}

/// The two files a profile is looked up in.
pub(crate) fn files(env: &Env) -> (PathBuf, PathBuf) {
    let home = env.home();
    let aws = |name: &str| home.join(".aws").join(name);
    let creds = env
        .get("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| aws("credentials"));
    let conf = env
        .get("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| aws("config"));
    (creds, conf)
}

/// The profile named by `AWS_PROFILE` (or `AWS_DEFAULT_PROFILE`, else `default`). `Ok(None)` if
/// the default profile is in neither file; an error if a named profile is missing or a file
/// cannot be read.
pub(crate) fn load(env: &Env) -> Result<Option<Profile>, String> {
    let explicit = env.get("AWS_PROFILE").or(env.get("AWS_DEFAULT_PROFILE"));
    let name = explicit.unwrap_or("default").to_string();
    let (creds_path, conf_path) = files(env);
    let creds = read_small(&creds_path)?.map(|t| parse_ini(&t));
    let conf = read_small(&conf_path)?.map(|t| parse_ini(&t));
    let from_creds = creds.as_ref().and_then(|c| c.get(&name));
    let conf_section = if name == "default" {
        conf.as_ref()
            .and_then(|c| c.get("default").or(c.get("profile default")))
    } else {
        conf.as_ref()
            .and_then(|c| c.get(&format!("profile {name}")))
    };
    if from_creds.is_none() && conf_section.is_none() {
        return match explicit {
            Some(_) => Err(format!(
                "AWS profile `{name}` (AWS_PROFILE) is in neither {} nor {}",
                creds_path.display(),
                conf_path.display()
            )),
            None => Ok(None),
        };
    }
    // The credentials file wins for credentials, as in the AWS command line.
    let get = |k: &str| {
        from_creds
            .and_then(|s| s.get(k))
            .or_else(|| conf_section.and_then(|s| s.get(k)))
            .cloned()
    };
    let mut sources = Vec::new();
    if from_creds.is_some() {
        sources.push(creds_path.display().to_string());
    }
    if conf_section.is_some() {
        sources.push(conf_path.display().to_string());
    }
    let unsupported = [
        "role_arn",
        "credential_process",
        "sso_start_url",
        "sso_session",
        "web_identity_token_file",
    ]
    .into_iter()
    .find(|k| get(k).is_some())
    .map(str::to_string);
    Ok(Some(Profile {
        access_key_id: get("aws_access_key_id"),
        secret_access_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region: get("region"),
        endpoint_url: get("s3.endpoint_url").or_else(|| get("endpoint_url")),
        unsupported,
        source: format!("profile `{name}` in {}", sources.join(" and ")),
        name,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(dir: &Path, extra: &[(&str, &str)]) -> Env {
        let mut v = vec![("HOME".to_string(), dir.display().to_string())];
        v.extend(extra.iter().map(|(k, x)| (k.to_string(), x.to_string())));
        Env::from_pairs(v)
    }

    #[test]
    fn ini_sections_and_nested_blocks() {
        let t = "# c\n[default]\naws_access_key_id = AK\n ; x\n[profile  dev ]\nregion=eu-west-1\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n  other = 1\nendpoint_url = http://x\nbroken line\n";
        let s = parse_ini(t);
        assert_eq!(s["default"]["aws_access_key_id"], "AK");
        assert_eq!(s["profile dev"]["region"], "eu-west-1");
        assert_eq!(s["profile dev"]["s3.endpoint_url"], "http://127.0.0.1:9000");
        assert_eq!(s["profile dev"]["endpoint_url"], "http://x");
        assert_eq!(s["profile dev"].len(), 4);
    }

    #[test]
    fn profiles_from_both_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".aws")).unwrap();
        std::fs::write(
            d.path().join(".aws/credentials"),
            "[default]\naws_access_key_id=A1\naws_secret_access_key=S1\n[dev]\naws_access_key_id=A2\naws_secret_access_key=S2\naws_session_token=T2\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(".aws/config"),
            "[default]\nregion=us-west-2\n[profile dev]\nregion=eu-central-1\nendpoint_url=http://127.0.0.1:1\n[profile sso]\nsso_session=x\n",
        )
        .unwrap();
        let p = load(&env_with(d.path(), &[])).unwrap().unwrap();
        assert_eq!(
            (p.access_key_id.as_deref(), p.secret_access_key.as_deref()),
            (Some("A1"), Some("S1"))
        );
        assert_eq!(p.region.as_deref(), Some("us-west-2"));
        assert_eq!(p.session_token, None);
        let p = load(&env_with(d.path(), &[("AWS_PROFILE", "dev")]))
            .unwrap()
            .unwrap();
        assert_eq!(p.session_token.as_deref(), Some("T2"));
        assert_eq!(p.region.as_deref(), Some("eu-central-1"));
        assert_eq!(p.endpoint_url.as_deref(), Some("http://127.0.0.1:1"));
        assert!(p.source.contains("credentials") && p.source.contains("config"));
        let p = load(&env_with(d.path(), &[("AWS_PROFILE", "sso")]))
            .unwrap()
            .unwrap();
        assert_eq!(p.unsupported.as_deref(), Some("sso_session"));
        let e = load(&env_with(d.path(), &[("AWS_PROFILE", "nope")])).unwrap_err();
        assert!(
            e.contains("`nope`") && e.contains(".aws/credentials"),
            "{e}"
        );
    }

    #[test]
    fn no_files_is_no_profile() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(load(&env_with(d.path(), &[])).unwrap(), None);
        let big = d.path().join("big");
        std::fs::write(&big, vec![b'#'; (MAX_FILE + 1) as usize]).unwrap();
        assert!(load(&env_with(
            d.path(),
            &[("AWS_SHARED_CREDENTIALS_FILE", big.to_str().unwrap())]
        ))
        .is_err());
    }
}
