//! HTTP: `/metrics`, a landing page at `/`, 404 elsewhere.
//!
//! `/metrics` answers the 0.0.4 text whatever the Accept header says, as process-exporter
//! does (Go's promhttp without `EnableOpenMetrics`): Prometheus prefers OpenMetrics, and a
//! scrape it parses as OpenMetrics stores other metadata (counter families without `_total`)
//! than process-exporter's. `-web.enable-openmetrics` turns negotiation on
//! ([`negotiate`]).
//!
//! hyper 1 (HTTP/1.1 only) on a current-thread tokio runtime: the maintained, minimal way
//! to serve a few scrapes a minute without a thread per connection, while a slow or idle
//! client costs a task, not a thread. A scrape's work is the collection, which blocks on
//! the backend: it runs on tokio's blocking pool, and scrapes arriving during a collection
//! share it ([`crate::Exporter::scrape`]).

use std::convert::Infallible;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::exporter::Exporter;
use crate::metrics;

/// The 0.0.4 text format's content type.
pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";
/// OpenMetrics 1.0's.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen address does not resolve.
    #[error("-web.listen-address {addr:?}: {why}")]
    Address {
        /// As given.
        addr: String,
        /// Why.
        why: String,
    },
    /// Binding or the runtime failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves a Go-style listen address: `:PORT` is every address (IPv6 and IPv4).
pub fn resolve(addr: &str) -> Result<Vec<SocketAddr>, ServeError> {
    let bad = |why: String| ServeError::Address {
        addr: addr.to_string(),
        why,
    };
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| bad("not a port".into()))?;
        return Ok(vec![
            SocketAddr::from(([0u16; 8], port)),
            SocketAddr::from(([0u8; 4], port)),
        ]);
    }
    let v: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .collect();
    if v.is_empty() {
        return Err(bad("resolves to no address".into()));
    }
    Ok(v)
}

/// Binds the first of `addrs` that can be bound (for `:PORT`: IPv6 with IPv4 mapped, or
/// IPv4 alone where IPv6 is off).
pub fn bind(addrs: &[SocketAddr]) -> Result<std::net::TcpListener, ServeError> {
    let mut last = None;
    for a in addrs {
        match std::net::TcpListener::bind(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some((*a, e)),
        }
    }
    let (addr, source) = last.unwrap_or_else(|| {
        (
            SocketAddr::from(([0u8; 4], 0)),
            std::io::Error::from(std::io::ErrorKind::AddrNotAvailable),
        )
    });
    Err(ServeError::Listen { addr, source })
}

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4.
    Text004,
    /// OpenMetrics 1.0.
    OpenMetrics,
}

/// The format of an answer to `accept`: OpenMetrics only when it is `enabled`
/// (`-web.enable-openmetrics`) and the header prefers it; else the 0.0.4 text (also to a
/// client that accepts only something else, as Go's client answers: Prometheus always adds
/// `*/*`).
pub fn negotiate(accept: Option<&str>, enabled: bool) -> Format {
    if enabled && wants_openmetrics(accept) {
        Format::OpenMetrics
    } else {
        Format::Text004
    }
}

/// Whether an Accept header prefers OpenMetrics to the 0.0.4 text: the highest q among
/// the media ranges, OpenMetrics winning ties (Prometheus asks for it first).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let mut best_om = -1f64;
    let mut best_text = -1f64;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1f64;
        for p in parts {
            if let Some(v) = p.strip_prefix("q=") {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        if q <= 0.0 {
            continue;
        }
        match media.as_str() {
            "application/openmetrics-text" => best_om = best_om.max(q),
            "text/plain" | "text/*" | "*/*" => best_text = best_text.max(q),
            _ => {}
        }
    }
    best_om > 0.0 && best_om >= best_text
}

const LANDING: &str = "<html>\n<head><title>taskdiag exporter</title></head>\n<body>\n\
<h1>taskdiag exporter</h1>\n<p><a href=\"METRICS\">Metrics</a></p>\n</body>\n</html>\n";

fn response(status: StatusCode, ctype: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

async fn handle(
    ex: Arc<Exporter>,
    path: Arc<str>,
    openmetrics: bool,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let p = req.uri().path();
    if p != &*path && p != "/" {
        return Ok(response(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n".into(),
        ));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(response(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n".into(),
        ));
    }
    if p != &*path {
        return Ok(response(
            StatusCode::OK,
            "text/html; charset=utf-8",
            LANDING.replace("METRICS", &path),
        ));
    }
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = negotiate(accept, openmetrics);
    let collected = match tokio::task::spawn_blocking(move || ex.scrape()).await {
        Ok(c) => c,
        Err(e) => {
            return Ok(response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                format!("collection failed: {e}\n"),
            ))
        }
    };
    let fams = collected.families.clone();
    Ok(if format == Format::OpenMetrics {
        match metrics::encode_openmetrics(fams) {
            Ok(body) => response(StatusCode::OK, OPENMETRICS, body),
            Err(_) => response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                "encoding failed\n".into(),
            ),
        }
    } else {
        response(StatusCode::OK, TEXT_004, metrics::encode_text(&fams))
    })
}

/// Serves `ex` on `listener` until the process ends; OpenMetrics to the scrapers that prefer
/// it when `openmetrics` (else the 0.0.4 text to all).
pub fn serve(
    ex: Arc<Exporter>,
    listener: std::net::TcpListener,
    telemetry_path: &str,
    openmetrics: bool,
) -> Result<(), ServeError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0u8; 4], 0)));
    let err = |source| ServeError::Listen { addr, source };
    listener.set_nonblocking(true).map_err(err)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(err)?;
    let path: Arc<str> = Arc::from(telemetry_path);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).map_err(err)?;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                // Out of descriptors, a connection reset before accept: go on.
                Err(e) => {
                    eprintln!("taskdiag-exporter: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let ex = Arc::clone(&ex);
            let path = Arc::clone(&path);
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    handle(Arc::clone(&ex), Arc::clone(&path), openmetrics, req)
                });
                // A client that goes away mid-response is its own business; one that sends
                // its headers too slowly (or never) is dropped, its task with it.
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(std::time::Duration::from_secs(30))
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_prefers_openmetrics_and_curl_does_not() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prom)));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some(
            "text/plain;version=0.0.4,application/openmetrics-text;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0")));
        assert!(wants_openmetrics(Some("application/openmetrics-text")));
    }

    /// Accept headers of Prometheus 2.49+ and 3.x, as its `acceptHeader` builds them from
    /// `scrape_protocols`: each protocol's media type with a falling q, then `*/*`. In order:
    /// 2.49's default; 2.49 with `[PrometheusText0.0.4, OpenMetricsText1.0.0]`; 3.x's
    /// default; 2.49 with `[PrometheusProto, OpenMetricsText1.0.0, PrometheusText0.0.4]`.
    const PROM_DEFAULT_2_49: &str = "application/openmetrics-text;version=1.0.0;q=0.5,\
        application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    const PROM_TEXT_FIRST: &str = "text/plain;version=0.0.4;q=0.5,\
        application/openmetrics-text;version=1.0.0;q=0.4,*/*;q=0.3";
    const PROM_3_DEFAULT: &str = "application/openmetrics-text;version=1.0.0;\
        escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,\
        text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,\
        */*;q=0.2";
    const PROM_PROTOBUF_FIRST: &str = "application/vnd.google.protobuf;\
        proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,\
        application/openmetrics-text;version=1.0.0;q=0.4,text/plain;version=0.0.4;q=0.3,\
        */*;q=0.2";

    #[test]
    fn every_scraper_gets_the_text_unless_openmetrics_is_enabled() {
        let prom_2_42 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                         version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let om_only = "application/openmetrics-text;version=1.0.0";
        for accept in [
            None,
            Some("*/*"),
            Some(prom_2_42),
            Some(PROM_DEFAULT_2_49),
            Some(PROM_3_DEFAULT),
            Some(PROM_TEXT_FIRST),
            Some(PROM_PROTOBUF_FIRST),
            Some(om_only),
        ] {
            assert_eq!(negotiate(accept, false), Format::Text004, "{accept:?}");
        }
        for (accept, want) in [
            (None, Format::Text004),
            (Some("*/*"), Format::Text004),
            (Some(prom_2_42), Format::OpenMetrics),
            (Some(PROM_DEFAULT_2_49), Format::OpenMetrics),
            (Some(PROM_3_DEFAULT), Format::OpenMetrics),
            (Some(PROM_TEXT_FIRST), Format::Text004),
            // No protobuf: the next preference.
            (Some(PROM_PROTOBUF_FIRST), Format::OpenMetrics),
            (Some(om_only), Format::OpenMetrics),
        ] {
            assert_eq!(negotiate(accept, true), want, "{accept:?}");
        }
    }

    #[test]
    fn go_listen_addresses_resolve() {
        let v = resolve(":9256").unwrap();
        assert_eq!(v.len(), 2);
        assert!(v
            .iter()
            .all(|a| a.port() == 9256 && a.ip().is_unspecified()));
        assert_eq!(
            resolve("127.0.0.1:1").unwrap(),
            [SocketAddr::from(([127, 0, 0, 1], 1))]
        );
        assert!(resolve(":x").is_err());
    }
}
