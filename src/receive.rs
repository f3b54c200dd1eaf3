//! `herald receive`: a receiver for trying herald out. It verifies each request's Standard
//! Webhooks signature, answers verification challenges, and prints what arrived.
//!
//! It speaks plain HTTP on the address it is given, so it pairs with `herald serve --dev`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::signing as sign;

/// Requests older or newer than this are refused, as the Standard Webhooks spec advises.
const TOLERANCE_SECS: i64 = 5 * 60;
const MAX_BODY: usize = 1024 * 1024;

/// Runs until the process is stopped.
pub async fn run(listener: TcpListener, secret: String) -> std::io::Result<()> {
    let secret = Arc::new(secret);
    println!(
        "herald receive: listening on http://{}/ (verifying signatures)",
        listener.local_addr()?
    );
    loop {
        let (stream, peer) = listener.accept().await?;
        let secret = secret.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let secret = secret.clone();
                async move { Ok::<_, Infallible>(handle(&secret, peer, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn handle(secret: &str, peer: SocketAddr, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (id, ts, sig, ty, attempt) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        header("herald-event-type"),
        header("herald-attempt"),
    );
    let path = req.uri().path().to_string();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "body too large"),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let fresh = ts
        .parse::<i64>()
        .is_ok_and(|t| (now - t).abs() <= TOLERANCE_SECS);
    if !fresh || !sign::verify(secret, &id, &ts, &body, &sig) {
        println!("✗ {peer} POST {path}: signature does not verify (id={id:?} timestamp={ts:?}); answered 401");
        return reply(StatusCode::UNAUTHORIZED, "invalid signature");
    }
    // A verification challenge: answer the hex HMAC of the nonce.
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
        if v["type"] == "endpoint.verification" {
            if let Some(nonce) = v["nonce"].as_str() {
                println!("✓ verification challenge from herald answered");
                let answer = sign::hex_hmac(&sign::secret_key(secret), nonce.as_bytes());
                return reply(StatusCode::OK, &answer);
            }
        }
    }
    println!(
        "✓ {id} type={ty} attempt={attempt} verified\n  {}",
        String::from_utf8_lossy(&body)
    );
    reply(StatusCode::OK, "ok")
}

fn reply(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r
}
