//! A snapshot of the environment variables the remote stores read (the process's, or a test's).

use std::collections::HashMap;
use std::path::PathBuf;

/// A snapshot of environment variables (the process's, or given by a test). Empty values count
/// as unset.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: HashMap<String, String>,
}

impl Env {
    /// The process environment (variables that are not UTF-8 are skipped).
    pub(crate) fn from_process() -> Env {
        Env::from_pairs(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// The variables `pairs`, empty values left out as unset (a later pair replaces an earlier
    /// one of the same name).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Env {
        Env {
            vars: pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    pub(super) fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
    }

    /// `$HOME`, else `/`.
    pub(crate) fn home(&self) -> PathBuf {
        PathBuf::from(self.get("HOME").unwrap_or("/"))
    }
}
