//! A TCP proxy on 127.0.0.1 that adds latency, for `scripts/bench.sh` (object storage under
//! realistic conditions): every chunk a client sends (an HTTP request) reaches the server
//! DELAY_MS later, so each request/answer round trip costs DELAY_MS more; answers flow back
//! unchanged (cap their rate in the server, e.g. nginx `limit_rate`).
//!
//! Usage: `latency_proxy UPSTREAM_PORT DELAY_MS`: prints the port it listens on (a free one of
//! 127.0.0.1), then serves until killed. Nothing but 127.0.0.1 is ever connected to.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(up), Some(delay)) = (
        args.get(1).and_then(|a| a.parse::<u16>().ok()),
        args.get(2).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: latency_proxy UPSTREAM_PORT DELAY_MS");
        std::process::exit(2);
    };
    let delay = Duration::from_millis(delay);
    let listener = match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("latency_proxy: bind 127.0.0.1:0: {e}");
            std::process::exit(1);
        }
    };
    match listener.local_addr() {
        Ok(a) => println!("{}", a.port()),
        Err(e) => {
            eprintln!("latency_proxy: {e}");
            std::process::exit(1);
        }
    }
    let _ = std::io::stdout().flush();
    for client in listener.incoming().flatten() {
        std::thread::spawn(move || serve(client, up, delay));
    }
}

fn serve(client: TcpStream, up: u16, delay: Duration) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", up)) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // Answers: straight back.
    let back = std::thread::spawn(move || copy(s2, c2, Duration::ZERO));
    // Requests: each chunk delayed.
    copy(client, server, delay);
    let _ = back.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
