//! The SMTP side of failure alerts: lettre's async transport over rustls (ring), trusting the
//! bundled web PKI roots plus `delivery.extra_ca_file`, as every other TLS client of herald
//! (src/tls.rs). lettre 0.11 builds its own rustls `ClientConfig` from these parameters (it
//! takes no ready-made one); the roots are the same webpki-roots set and the CA file is read
//! by the same function as deliveries'.
//!
//! `smtp://` requires STARTTLS (a server that does not offer it gets nothing, not even the
//! credentials); `smtps://` is TLS from the first byte. Every try has [`TRY_TIMEOUT`].

use std::path::Path;
use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::config::{SmtpServer, SmtpTls};

/// How long one try may take, connect to the server's answer to the message.
pub const TRY_TIMEOUT: Duration = Duration::from_secs(30);

/// The transport alert mails go out through.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

/// Why the transport cannot be set up (the CA file); never quotes the URL.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(pub String);

impl Mailer {
    pub fn new(server: &SmtpServer, extra_ca_file: Option<&Path>) -> Result<Mailer, SetupError> {
        let mut params = TlsParameters::builder(server.host.clone())
            .certificate_store(CertificateStore::WebpkiRoots);
        if let Some(path) = extra_ca_file {
            let certs = crate::tls::extra_certificates(path).map_err(|e| {
                SetupError(format!(
                    "delivery.extra_ca_file: cannot read {}: {e}",
                    path.display()
                ))
            })?;
            for der in certs {
                let cert = Certificate::from_der(der.to_vec())
                    .map_err(|e| SetupError(format!("delivery.extra_ca_file: {e}")))?;
                params = params.add_root_certificate(cert);
            }
        }
        let params = params
            .build_rustls()
            .map_err(|e| SetupError(format!("alerts: cannot set up TLS: {e}")))?;
        let tls = match server.tls {
            SmtpTls::StartTls => Tls::Required(params),
            SmtpTls::Implicit => Tls::Wrapper(params),
        };
        // "dangerous" only because it starts without TLS: `tls` is set right after.
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&server.host)
            .port(server.port)
            .tls(tls)
            .timeout(Some(TRY_TIMEOUT));
        if let Some((user, password)) = &server.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        Ok(Mailer {
            transport: builder.build(),
        })
    }

    /// One try: the message handed to the server, or why not (the server's answer or the
    /// connection's error; never the credentials).
    pub async fn send(&self, message: Message) -> Result<(), String> {
        match tokio::time::timeout(TRY_TIMEOUT, self.transport.send(message)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(describe(&e)),
            Err(_) => Err(format!("no answer within {}s", TRY_TIMEOUT.as_secs())),
        }
    }
}

/// The error and its causes, on one line.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
