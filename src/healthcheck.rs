//! `dirichlet-release healthcheck [--ready]`: the container's HEALTHCHECK without curl. One
//! HTTP/1.1 GET of `/healthz` (or `/readyz` with `--ready`) to the port the service listens on,
//! from the same configuration the server reads (`DIRICHLET_LISTEN`, `DIRICHLET_CONFIG`): 200 is
//! healthy, anything else (no answer within the timeout included) is not.
//!
//! `/healthz` by default: a container whose database is down is still alive and recovers on its
//! own (start-up waits for the database; requests get 503 meanwhile), so an orchestrator that
//! restarts unhealthy containers must not restart it for that. `/readyz` is for whoever wants
//! "healthy" to mean "serving releases".

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// Within the Dockerfile's `HEALTHCHECK --timeout=3s`.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Where to reach a server listening on `listen`: a wildcard address is reached on loopback.
pub fn target(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// GET `path` from `addr`: `Ok` on 200, otherwise what went wrong.
pub fn check(addr: SocketAddr, path: &str) -> Result<(), String> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: dirichlet-release-healthcheck\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send the request to {addr}: {e}"))?;
    // The status line is all that is needed; the body is small but need not be read.
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < head.len() && !head[..read].contains(&b'\n') {
        match stream.read(&mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => return Err(format!("no answer from {addr}: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&head[..read]);
    let line = line.lines().next().unwrap_or_default();
    let mut words = line.split(' ');
    match (words.next(), words.next()) {
        (Some(version), Some("200")) if version.starts_with("HTTP/1.") => Ok(()),
        _ => Err(format!("GET {path} on {addr}: {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server answering `response` to the first connection.
    fn answer(response: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(response.as_bytes());
        });
        addr
    }

    #[test]
    fn only_a_200_is_healthy() {
        let ok = answer("HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n{\"status\":\"ok\"}");
        assert_eq!(check(ok, "/healthz"), Ok(()));
        let unavailable = answer("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
        assert!(check(unavailable, "/readyz").unwrap_err().contains("503"));
        let garbage = answer("SSH-2.0-OpenSSH\r\n");
        assert!(check(garbage, "/healthz").is_err());
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(
            check(closed, "/healthz").is_err(),
            "nothing listens there any more"
        );
    }

    #[test]
    fn a_wildcard_listener_is_reached_on_loopback() {
        let t = |s: &str| target(s.parse().unwrap()).to_string();
        assert_eq!(t("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(t("[::]:9000"), "[::1]:9000");
        assert_eq!(t("10.1.2.3:8080"), "10.1.2.3:8080");
    }
}
