//! A checkpoint's edits, kept beside it and never in it: a directory DIR holding `journal` (one
//! JSON record per line, each appended whole and synced before it counts) and `tensors/N.npy`
//! (the values a record sets, each written under a temporary name, synced and renamed before
//! the record naming it is appended). Each edit is atomic: a record cut short by a crash (no
//! newline at the end of the file) is cut off when the journal is next opened, and a tensor file
//! no record names is removed then. The records, in order, are replayed over the source by
//! [`super::edited`] (the mount and `tfmount.open`) and turned into `export`'s edits by `commit`.
//!
//! Records (`KEY` a JSON string, or `{"hex":"..."}` for a key that is not UTF-8):
//! - `{"drop":KEY}`: the tensor KEY goes; `{"drop":KEY,"subtree":true}`: every tensor under
//!   `KEY/`.
//! - `{"rename":KEY,"to":KEY2}`: the tensor KEY is now KEY2 (one already at KEY2 goes);
//!   `"subtree":true`: every tensor under `KEY/` moves under `KEY2/` (what was there goes).
//! - `{"set":KEY,"npy":"tensors/N.npy"}`: the tensor KEY (new or not) takes the array of the file.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The journal's file name inside DIR.
pub(crate) const JOURNAL: &str = "journal";
/// The directory of new values inside DIR.
pub(crate) const TENSORS: &str = "tensors";
/// The first line of every journal: what the directory is, and of which source.
const MAGIC: &str = "tfmount-edits";

/// One edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// The tensor `key` (or, `subtree`, every tensor under `key/`) goes.
    Drop { key: Vec<u8>, subtree: bool },
    /// The tensor `key` is renamed `to` (or, `subtree`, `key/...` becomes `to/...`).
    Rename {
        key: Vec<u8>,
        to: Vec<u8>,
        subtree: bool,
    },
    /// The tensor `key` takes the array of `DIR/npy` (a path relative to DIR).
    Set { key: Vec<u8>, npy: String },
}

fn key_json(k: &[u8]) -> Value {
    match std::str::from_utf8(k) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => {
            let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
            json!({ "hex": hex })
        }
    }
}

fn key_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Object(o) => {
            let h = o.get("hex")?.as_str()?;
            if h.len() % 2 != 0 {
                return None;
            }
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
                .collect()
        }
        _ => None,
    }
}

impl Record {
    /// The record's line (without its newline).
    pub(crate) fn line(&self) -> String {
        match self {
            Record::Drop { key, subtree } => {
                let mut v = json!({ "drop": key_json(key) });
                if *subtree {
                    v["subtree"] = Value::Bool(true);
                }
                v.to_string()
            }
            Record::Rename { key, to, subtree } => {
                let mut v = json!({ "rename": key_json(key), "to": key_json(to) });
                if *subtree {
                    v["subtree"] = Value::Bool(true);
                }
                v.to_string()
            }
            Record::Set { key, npy } => json!({ "set": key_json(key), "npy": npy }).to_string(),
        }
    }

    /// Whether the record names `key` or a key under `key/` (as its key, or what it renames
    /// to).
    pub(crate) fn names(&self, key: &[u8]) -> bool {
        let hits = |k: &[u8]| k == key || (k.starts_with(key) && k.get(key.len()) == Some(&b'/'));
        match self {
            Record::Drop { key: k, .. } | Record::Set { key: k, .. } => hits(k),
            Record::Rename { key: k, to, .. } => hits(k) || hits(to),
        }
    }

    /// Whether a discard of `keys` takes the record: every record when `keys` is empty, else
    /// those naming one of them.
    pub(crate) fn discarded_by<K: AsRef<[u8]>>(&self, keys: &[K]) -> bool {
        keys.is_empty() || keys.iter().any(|k| self.names(k.as_ref()))
    }

    /// Parses one line; `None` for what is not a record.
    pub(crate) fn parse(line: &str) -> Option<Record> {
        let v: Value = serde_json::from_str(line).ok()?;
        let subtree = v.get("subtree").and_then(Value::as_bool).unwrap_or(false);
        if let Some(k) = v.get("drop") {
            return Some(Record::Drop {
                key: key_of(k)?,
                subtree,
            });
        }
        if let Some(k) = v.get("rename") {
            return Some(Record::Rename {
                key: key_of(k)?,
                to: key_of(v.get("to")?)?,
                subtree,
            });
        }
        if let Some(k) = v.get("set") {
            let npy = v.get("npy")?.as_str()?;
            // Only a file of DIR/tensors/, by its plain name.
            let name = npy.strip_prefix("tensors/")?;
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return None;
            }
            return Some(Record::Set {
                key: key_of(k)?,
                npy: npy.to_string(),
            });
        }
        None
    }
}

/// An edits directory, opened: its records in order.
pub(crate) struct Journal {
    dir: PathBuf,
    records: Vec<Record>,
    /// The next `tensors/N.npy` number.
    next: u64,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

/// Syncs a directory (a rename or a new name in it made durable).
fn sync_dir(dir: &Path) -> Result<(), String> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(dir, e))
}

impl Journal {
    /// Opens the edits directory `dir` for reading: its records, a torn last one left out.
    /// Nothing is changed on disk. A directory that is not an edits directory is refused.
    pub(crate) fn read(dir: &Path) -> Result<Journal, String> {
        let path = dir.join(JOURNAL);
        let f = std::fs::File::open(&path).map_err(|e| {
            format!(
                "{}: not an edits directory (no {JOURNAL}: {e})",
                dir.display()
            )
        })?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut { f }, &mut bytes).map_err(|e| io_err(&path, e))?;
        let (records, next) = records_of(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            records,
            next,
        })
    }

    /// Opens `dir` to edit, making it (and its journal, headed by `source`) if it is not there:
    /// a torn last record is cut off and tensor files no record names are removed (what a
    /// crash left). A journal made for another source is refused.
    pub(crate) fn open(dir: &Path, source: &str) -> Result<Journal, String> {
        std::fs::create_dir_all(dir.join(TENSORS)).map_err(|e| io_err(dir, e))?;
        let path = dir.join(JOURNAL);
        if !path.exists() {
            let tmp = dir.join(format!("{JOURNAL}.tmp"));
            let head = json!({ MAGIC: 1, "source": source }).to_string();
            write_synced(&tmp, format!("{head}\n").as_bytes())?;
            std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
            sync_dir(dir)?;
        }
        cut_torn(&path)?;
        let j = Journal::read_for(dir, source)?;
        j.remove_unnamed()?;
        Ok(j)
    }

    /// [`Journal::read`], refused when the journal was made for another source than `source`.
    pub(crate) fn read_for(dir: &Path, source: &str) -> Result<Journal, String> {
        let j = Journal::read(dir)?;
        match j.source()? {
            Some(s) if s != source => Err(format!(
                "{}: holds the edits of {s}, not of {source} (another -o edit=DIR)",
                dir.display()
            )),
            _ => Ok(j),
        }
    }

    /// The source the journal was made for (from its first line).
    pub(crate) fn source(&self) -> Result<Option<String>, String> {
        let path = self.dir.join(JOURNAL);
        let f = std::fs::File::open(&path).map_err(|e| io_err(&path, e))?;
        let mut line = String::new();
        std::io::BufReader::new(f)
            .read_line(&mut line)
            .map_err(|e| io_err(&path, e))?;
        let v: Value = serde_json::from_str(line.trim_end()).unwrap_or(Value::Null);
        Ok(v.get("source").and_then(Value::as_str).map(str::to_string))
    }

    /// The source the journal was made for, or an error saying it names none.
    pub(crate) fn named_source(&self) -> Result<String, String> {
        self.source()?
            .ok_or_else(|| format!("{}: its journal names no source", self.dir.display()))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn records(&self) -> &[Record] {
        &self.records
    }

    /// Where record `npy` (relative to DIR) is.
    pub(crate) fn path_of(&self, npy: &str) -> PathBuf {
        self.dir.join(npy)
    }

    /// Appends `r` in one write: it counts once this returns, and survives the process (a
    /// killed daemon); `sync` also makes it survive the machine (a power loss).
    pub(crate) fn append(&mut self, r: Record, sync: bool) -> Result<(), String> {
        let path = self.dir.join(JOURNAL);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        f.write_all(format!("{}\n", r.line()).as_bytes())
            .and_then(|_| if sync { f.sync_data() } else { Ok(()) })
            .map_err(|e| io_err(&path, e))?;
        self.records.push(r);
        Ok(())
    }

    /// Makes what was appended survive the machine.
    pub(crate) fn sync(&self) -> Result<(), String> {
        let path = self.dir.join(JOURNAL);
        std::fs::File::open(&path)
            .and_then(|f| f.sync_data())
            .map_err(|e| io_err(&path, e))
    }

    /// A new file for values, under a temporary name in `DIR/tensors/`: its path, and the
    /// name ([`Record::Set`]'s `npy`) [`Journal::keep`] gives it.
    pub(crate) fn new_tensor_file(&mut self) -> (PathBuf, String) {
        let n = self.next;
        self.next += 1;
        let name = format!("{TENSORS}/{n}.npy");
        (self.dir.join(format!("{TENSORS}/.{n}.npy.tmp")), name)
    }

    /// Makes the temporary file `tmp` (written whole) the values file `name`: renamed (with
    /// `sync`, synced first and the directory after). The record naming it is appended after.
    pub(crate) fn keep(&self, tmp: &Path, name: &str, sync: bool) -> Result<(), String> {
        if sync {
            std::fs::File::open(tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err(tmp, e))?;
        }
        let to = self.dir.join(name);
        std::fs::rename(tmp, &to).map_err(|e| io_err(&to, e))?;
        if sync {
            sync_dir(&self.dir.join(TENSORS))?;
        }
        Ok(())
    }

    /// Keeps only the records `keep` says to (written anew under a temporary name and renamed
    /// over the journal); the values files no record names any more are removed. Returns how
    /// many records went.
    pub(crate) fn discard(&mut self, keep: impl Fn(&Record) -> bool) -> Result<usize, String> {
        let path = self.dir.join(JOURNAL);
        let f = std::fs::File::open(&path).map_err(|e| io_err(&path, e))?;
        let mut head = String::new();
        std::io::BufReader::new(f)
            .read_line(&mut head)
            .map_err(|e| io_err(&path, e))?;
        let before = self.records.len();
        self.records.retain(|r| keep(r));
        let mut text = head;
        for r in &self.records {
            text.push_str(&r.line());
            text.push('\n');
        }
        let tmp = self.dir.join(format!("{JOURNAL}.tmp"));
        write_synced(&tmp, text.as_bytes())?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        sync_dir(&self.dir)?;
        self.remove_unnamed()?;
        Ok(before - self.records.len())
    }

    /// Removes the files of `DIR/tensors/` no record names (temporaries a crash left, values
    /// of discarded records).
    fn remove_unnamed(&self) -> Result<(), String> {
        let dir = self.dir.join(TENSORS);
        let named: std::collections::HashSet<&str> = self
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Set { npy, .. } => npy.strip_prefix("tensors/"),
                _ => None,
            })
            .collect();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&dir, e)),
        };
        for e in rd.flatten() {
            let name = e.file_name();
            if !named.contains(name.to_string_lossy().as_ref()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        Ok(())
    }
}

/// The records of a journal's bytes (its first line the header, a torn last line left out),
/// and the next values file number; an error in words for what is not a journal tfmount writes.
pub(crate) fn records_of(bytes: &[u8]) -> Result<(Vec<Record>, u64), String> {
    let mut records = Vec::new();
    let mut next = 0u64;
    let whole = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(&bytes[..0], |i| &bytes[..i]);
    let mut lines = whole.split(|&b| b == b'\n');
    let head = lines.next().unwrap_or_default();
    let head: Value = serde_json::from_slice(head).unwrap_or(Value::Null);
    if head.get(MAGIC).is_none() {
        return Err(format!(
            "not a tfmount edits journal (its first line is not a {MAGIC} header)"
        ));
    }
    for line in lines {
        let text = String::from_utf8_lossy(line);
        match Record::parse(&text) {
            Some(r) => {
                if let Record::Set { npy, .. } = &r {
                    if let Some(n) = number_of(npy) {
                        next = next.max(n.saturating_add(1));
                    }
                }
                records.push(r);
            }
            None => {
                return Err(format!(
                    "record {} is not one tfmount writes: {}",
                    records.len() + 1,
                    text.chars().take(120).collect::<String>()
                ))
            }
        }
    }
    Ok((records, next))
}

/// `N` of `tensors/N.npy`.
fn number_of(npy: &str) -> Option<u64> {
    npy.strip_prefix("tensors/")?
        .strip_suffix(".npy")?
        .parse()
        .ok()
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| io_err(path, e))
}

/// Cuts the journal at `path` after its last newline (a record a crash cut short).
fn cut_torn(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if keep < bytes.len() {
        log::warn!(
            "{}: its last record was cut short (a crash while editing): left out",
            path.display()
        );
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        f.set_len(keep as u64)
            .and_then(|_| f.sync_all())
            .map_err(|e| io_err(path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_lines() {
        for r in [
            Record::Drop {
                key: b"a/b".to_vec(),
                subtree: false,
            },
            Record::Drop {
                key: b"opt".to_vec(),
                subtree: true,
            },
            Record::Rename {
                key: b"x\xff".to_vec(),
                to: b"y".to_vec(),
                subtree: false,
            },
            Record::Set {
                key: b"w".to_vec(),
                npy: "tensors/3.npy".into(),
            },
        ] {
            assert_eq!(Record::parse(&r.line()), Some(r.clone()), "{}", r.line());
        }
        // A values file outside DIR/tensors/ is not a record.
        assert_eq!(Record::parse(r#"{"set":"w","npy":"../x.npy"}"#), None);
        assert_eq!(
            Record::parse(r#"{"set":"w","npy":"tensors/../x.npy"}"#),
            None
        );
        assert_eq!(Record::parse(r#"{"drop":{"hex":"zz"}}"#), None);
    }

    #[test]
    fn a_torn_record_and_unnamed_files_are_what_a_crash_leaves_and_go() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("e");
        let mut j = Journal::open(&dir, "/src").unwrap();
        let (tmp, name) = j.new_tensor_file();
        std::fs::write(&tmp, b"npy").unwrap();
        j.keep(&tmp, &name, true).unwrap();
        j.append(
            Record::Set {
                key: b"k".to_vec(),
                npy: name.clone(),
            },
            true,
        )
        .unwrap();
        j.append(
            Record::Drop {
                key: b"d".to_vec(),
                subtree: false,
            },
            false,
        )
        .unwrap();
        // A crash: half a record, a temporary and a values file never named.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(JOURNAL))
            .unwrap();
        f.write_all(br#"{"drop":"hal"#).unwrap();
        let (tmp2, _) = j.new_tensor_file();
        std::fs::write(&tmp2, b"half").unwrap();
        std::fs::write(dir.join("tensors/9.npy"), b"x").unwrap();
        let j = Journal::open(&dir, "/src").unwrap();
        assert_eq!(j.records().len(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.join(TENSORS))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [name.strip_prefix("tensors/").unwrap()]);
        // The next values file does not reuse a number.
        let mut j = j;
        assert_eq!(j.new_tensor_file().1, "tensors/1.npy");
        // Another source's directory is refused.
        let e = Journal::open(&dir, "/other").err().unwrap();
        assert!(e.contains("holds the edits of /src"), "{e}");
        // Discarding drops records and their files.
        let mut j = Journal::open(&dir, "/src").unwrap();
        assert_eq!(j.discard(|r| matches!(r, Record::Drop { .. })).unwrap(), 1);
        assert_eq!(Journal::read(&dir).unwrap().records().len(), 1);
        assert_eq!(std::fs::read_dir(dir.join(TENSORS)).unwrap().count(), 0);
    }
}
