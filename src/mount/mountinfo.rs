//! The mounts this process sees: /proc/self/mountinfo, read and unescaped in one place (whether
//! a path is a mount point, a mount's device for its readahead, `tfmount list` and `umount`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One line of /proc/self/mountinfo, its fields unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountLine {
    /// `MAJOR:MINOR` of the mounted file system.
    pub(crate) device: String,
    pub(crate) mountpoint: PathBuf,
    pub(crate) fstype: String,
    pub(crate) source: Vec<u8>,
}

/// Every mount of /proc/self/mountinfo, in its order (a later one covers an earlier one at the
/// same mount point); none when it cannot be read.
pub(crate) fn mounts() -> Vec<MountLine> {
    std::fs::read("/proc/self/mountinfo")
        .map(|info| parse(&info))
        .unwrap_or_default()
}

/// The lines of a mountinfo file (lines that do not parse are left out).
fn parse(info: &[u8]) -> Vec<MountLine> {
    info.split(|&b| b == b'\n')
        .filter_map(|line| {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            // "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER"
            let dash = f.iter().skip(6).position(|x| *x == b"-")? + 6;
            Some(MountLine {
                device: String::from_utf8_lossy(f.get(2)?).into_owned(),
                mountpoint: PathBuf::from(OsString::from_vec(unescape(f.get(4)?))),
                fstype: String::from_utf8_lossy(f.get(dash + 1)?).into_owned(),
                source: unescape(f.get(dash + 2)?),
            })
        })
        .collect()
}

/// A field with the kernel's octal escapes (`\040` for a space, `\011`, `\012`, `\134`)
/// undone.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\'
            && i + 3 < s.len()
            && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (s[i + 1] - b'0') as u32 * 64
                + (s[i + 2] - b'0') as u32 * 8
                + (s[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the kernel writes them: optional fields, escaped spaces, a line cut short.
    #[test]
    fn lines_parse_with_optional_fields_and_escapes() {
        let info = b"36 35 98:0 / /mnt/a\\040b rw,noatime master:1 shared:2 - fuse.tfmount /data/m\\040x ro\n\
37 35 0:52 / /mnt/c ro - fuse tfmount rw,user_id=0\n\
38 35 0:53 /\n";
        let m = parse(info);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].device, "98:0");
        assert_eq!(m[0].mountpoint, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, "fuse.tfmount");
        assert_eq!(m[0].source, b"/data/m x");
        assert_eq!(
            (m[1].fstype.as_str(), &m[1].source[..]),
            ("fuse", &b"tfmount"[..])
        );
    }

    #[test]
    fn a_backslash_not_followed_by_three_octal_digits_is_kept() {
        assert_eq!(unescape(b"a\\09b\\"), b"a\\09b\\");
        assert_eq!(unescape(b"\\134x"), b"\\x");
    }
}
