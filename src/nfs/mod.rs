//! The NFSv3 adapter: the tree [`crate::fs::Fs`] shows, served over NFSv3 and its MOUNT
//! protocol on a TCP port (127.0.0.1 unless told otherwise), for systems where FUSE is missing
//! or broken (macOS, Windows, containers without `/dev/fuse`); the system's own NFS client
//! mounts it. A peer of `fuse.rs`: translation only, over the same core.
//!
//! - [`xdr`]: the wire encoding, bounded (no allocation sized by a length read from the wire);
//! - [`proto`]: one call answered from the core (NFS, MOUNT, the portmapper's GETPORT), file
//!   handles from inode numbers and generations;
//! - [`server`]: sockets, record marking, the worker threads;
//! - here: the system's mount command for this OS.

pub(crate) mod proto;
pub(crate) mod server;
pub(crate) mod xdr;

use std::net::SocketAddr;
use std::path::Path;

pub(crate) use proto::MountEvent;
pub(crate) use server::Server;

/// The command that mounts the server at `addr` on `mountpoint` with this system's NFS client:
/// program and arguments. Read-only, NFSv3 over TCP at the server's port for both NFS and MOUNT
/// (no portmapper), no lock manager (nothing is locked in a read-only tree), 1 MiB reads, and
/// attributes cached for long (the tree does not change but for a live directory's new
/// checkpoints).
pub(crate) fn mount_command(addr: SocketAddr, mountpoint: &Path) -> Vec<String> {
    let (ip, port) = (addr.ip(), addr.port());
    let mp = mountpoint.display().to_string();
    if cfg!(target_os = "macos") {
        // The options hf-mount and xet's nfsserve mount with on macOS.
        vec![
            "mount_nfs".into(),
            "-o".into(),
            format!("ro,nolocks,locallocks,vers=3,tcp,rsize=1048576,actimeo=120,port={port},mountport={port}"),
            format!("{ip}:/"),
            mp,
        ]
    } else if cfg!(windows) {
        // Windows' client asks the portmapper on port 111 and mounts port 2049 only.
        vec![
            "mount.exe".into(),
            "-o".into(),
            "anon,nolock,mtype=soft,timeout=60".into(),
            format!("\\\\{ip}\\!"),
            mp,
        ]
    } else {
        vec![
            "mount".into(),
            "-t".into(),
            "nfs".into(),
            "-o".into(),
            format!("ro,vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock,soft,timeo=600,retrans=2,rsize=1048576,actimeo=120"),
            format!("{ip}:/"),
            mp,
        ]
    }
}

/// `argv` as a shell line (arguments with spaces or quotes quoted), for messages.
pub(crate) fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"\\$`".contains(c)) {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `[ADDR:]PORT` (`--nfs-serve`): a port alone is on 127.0.0.1; ADDR may be an IPv6 address in
/// brackets.
pub(crate) fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse::<SocketAddr>().map_err(|_| {
        format!("--nfs-serve {s}: not a port or an ADDRESS:PORT (e.g. 20490, 127.0.0.1:20490, [::1]:20490)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("2049").expect("a port"),
            "127.0.0.1:2049".parse().expect("addr")
        );
        assert_eq!(parse_listen("[::1]:7").expect("v6").to_string(), "[::1]:7");
        assert!(parse_listen("0.0.0.0").is_err());
        assert!(parse_listen("host:99999").is_err());
    }

    #[test]
    fn mount_line_quotes() {
        let l = shell_line(&["mount".into(), "/mnt/a b".into()]);
        assert_eq!(l, "mount '/mnt/a b'");
    }
}
