//! The database's URL: parsed by PostgreSQL's own client, checked at config load and named in
//! logs without its password.

/// The URL as PostgreSQL's client config. libpq's `sslmode=verify-ca` and `verify-full` are
/// taken as `require`: herald verifies the server's certificate and name whenever it uses TLS.
/// The error never quotes the URL.
pub fn parse_url(url: &str) -> Result<tokio_postgres::Config, String> {
    let url = url
        .replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require");
    url.parse::<tokio_postgres::Config>().map_err(|e| {
        format!(
            "is not a PostgreSQL connection URL ({e}); write \
                 postgres://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    })
}

/// Whether the URL is one herald can use; the reason never quotes the URL.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = parse_url(url)?;
    if parsed.get_hosts().is_empty() {
        return Err("names no host; write postgres://USER:PASSWORD@HOST:PORT/DATABASE".into());
    }
    Ok(())
}
