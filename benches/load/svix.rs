//! The svix phase: single-message ingest through the Svix-compatible API (docs/svix.md), as the
//! official client libraries send it, against `POST /v1/events` on the same herald, in
//! alternating runs. A message costs what an event does, plus its request key's kept answer
//! (one more write, durable before the answer).

use anyhow::{bail, Result};

use crate::drive::{self, Counters};
use crate::phases::{self, Setup, Target, ACCOUNT};
use crate::Opts;

/// Runs of each kind (`/v1/events`, `/api/v1/.../msg`), alternating; each round swaps which
/// goes first, so the backlog of deliveries that grows over the phase weighs on both alike.
const ROUNDS: usize = 6;

/// Each round: (events/s through `/v1/events`, messages/s through `/api/v1/`).
pub struct SvixFigures {
    pub rounds: Vec<(f64, f64)>,
}

pub async fn svix(opts: &Opts) -> Result<SvixFigures> {
    let mut s = phases::setup(opts, "svix", Target::Receiver).await?;
    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        let svix_first = round % 2 == 1;
        let mut svix = 0.0;
        if svix_first {
            svix = run(opts, &s).await?;
        }
        let own = phases::ingest_on(opts, &s, opts.clients, None).await?;
        if own.errors > 0 {
            bail!("{} ingest requests failed", own.errors);
        }
        if !svix_first {
            svix = run(opts, &s).await?;
        }
        rounds.push((own.events_per_s, svix));
    }
    s.herald.stop(false).await?;
    Ok(SvixFigures { rounds })
}

async fn run(opts: &Opts, s: &Setup) -> Result<f64> {
    let counters = std::sync::Arc::new(Counters::default());
    let start = std::time::Instant::now();
    let until = start + std::time::Duration::from_secs_f64(opts.seconds);
    let sampler = tokio::spawn(drive::sample(start, until, counters.clone(), None));
    drive::closed_svix(&s.bases(), ACCOUNT, opts.clients, until, counters.clone()).await;
    let samples = sampler.await?;
    let errors = counters.errors.load(std::sync::atomic::Ordering::Relaxed);
    if errors > 0 {
        bail!("{errors} message requests failed");
    }
    Ok(drive::rate(
        &samples,
        phases::warmup(opts.seconds),
        opts.seconds,
        |s| s.acked,
    ))
}

pub fn print(f: &SvixFigures) {
    eprintln!("svix: single ingest, /v1/events and /api/v1/app/{{app}}/msg alternating");
    for (i, (own, svix)) in f.rounds.iter().enumerate() {
        eprintln!(
            "  round {i}: {own:.0} events/s via /v1/events, {svix:.0} messages/s via /api/v1 ({:.0} %)",
            100.0 * svix / own.max(1.0)
        );
    }
    let (a, b) = f
        .rounds
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    eprintln!(
        "  all rounds: {:.0} % of /v1/events' rate (the bar: 90 %)",
        100.0 * b / f64::max(a, 1.0)
    );
}
