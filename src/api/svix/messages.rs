//! Messages (herald's events) and their attempts through the Svix-compatible API. A message is
//! ingested as `POST /v1/events` ingests an event: the same checks, fan-out and durable commit;
//! its `eventId` is herald's idempotency key (a repeat within 24 hours is a `409`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::endpoints::{channel, MAX_CHANNELS};
use super::{apps, list_of, ok, shapes, Answer, Caller, Query, SvixError};
use crate::api::ingest;
use crate::api::{AppState, Role};
use crate::clock::Millis;
use crate::ids::{self, EVENT};
use crate::model::{Attempt, Delivery, EventMeta};
use crate::store::prelude::*;
use crate::store::{ApiAnswer, DeliveryFilter, IngestOutcome};

/// Tags of a message at most.
const MAX_TAGS: usize = 5;
/// Deliveries read per page while a list collects its items.
const SCAN_PAGE: usize = 250;
/// Pages a list reads at most before it answers what it found (with an iterator to go on).
const SCAN_PAGES: usize = 40;

#[derive(Deserialize)]
struct MessageIn<'a> {
    #[serde(rename = "eventType")]
    event_type: Option<Value>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    #[serde(rename = "eventId")]
    event_id: Option<Value>,
    channels: Option<Value>,
    tags: Option<Value>,
    application: Option<Value>,
    #[serde(rename = "deliverAt")]
    deliver_at: Option<Value>,
}

/// A message's `channels` or `tags`: at most `max` channel-like names; absent is none.
fn names(field: &str, v: Option<&Value>, max: usize) -> Result<Vec<String>, SvixError> {
    v.map_or(Ok(Vec::new()), |v| {
        super::endpoints::strings(field, v, max, channel)
    })
}

/// A herald error about an ingest field, named as this API names it.
fn renamed(e: crate::api::error::ApiError) -> SvixError {
    let mut e = e;
    e.field = e.field.map(|f| match f.as_str() {
        "type" => "eventType".to_string(),
        "idempotency_key" => "eventId".to_string(),
        f if f.starts_with("/payload") => {
            format!("payload{}", f["/payload".len()..].replace('/', "."))
        }
        _ => f,
    });
    e.into()
}

pub async fn create(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
    q: &Query,
) -> Answer {
    if let Role::Portal(_) = caller.role {
        crate::api::body::discard_body(req).await;
        return Err(SvixError::forbidden(
            "a portal session cannot create messages",
        ));
    }
    ingest::refuse_when_stopping(state)?;
    let trace = crate::api::request_trace(&req);
    let with_content = q.flag("with_content", true)?;
    let bytes = crate::api::body::read_json_body(req, state.config.server.max_body_bytes).await?;
    let m: MessageIn = serde_json::from_slice(&bytes).map_err(|e| {
        SvixError::field(
            "",
            "value_error.jsondecode",
            format!("the body is not a message: {e}"),
        )
    })?;
    if m.deliver_at.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(SvixError::field(
            "deliverAt",
            "value_error",
            "herald does not schedule messages for later: leave deliverAt out",
        ));
    }
    let account = account_for(state, app, m.application.as_ref()).await?;
    let channels = names("channels", m.channels.as_ref(), MAX_CHANNELS)?;
    let tags = names("tags", m.tags.as_ref(), MAX_TAGS)?;
    let event_type = event_type_of(m.event_type)?;
    if m.payload.is_none() {
        return Err(SvixError::field(
            "payload",
            "value_error.missing",
            "payload is required",
        ));
    }
    // herald's own checks, as POST /v1/events makes them; the payload's bytes go through
    // untouched.
    let mut checked = ingest::check_fields(
        &state.config,
        &state.schemas,
        &account,
        Some(event_type),
        m.payload,
        m.event_id,
    )
    .map_err(renamed)?;
    checked.channels = channels;
    checked.tags = tags;
    checked.request_key = q.request_key.clone();
    let now = state.clock.now_ms();
    let meta = EventMeta {
        id: String::new(),
        account_id: checked.account_id.clone(),
        event_type: checked.event_type.clone(),
        received_at: now,
        idempotency_key: checked.idempotency_key.clone(),
        debounce_key: None,
        ordering_key: None,
        channels: checked.channels.clone(),
        tags: checked.tags.clone(),
        request_key: None,
        trace: trace.clone(),
        deliveries: Vec::new(),
    };
    let payload = checked.payload.clone();
    let outcome = ingest::store(state, vec![checked], now, trace).await?;
    let created = Created {
        meta,
        payload,
        account,
        now,
        with_content,
    };
    answer(state, q, outcome.first(), created).await
}

/// A message stored (or found stored), as its answer needs it.
struct Created {
    meta: EventMeta,
    payload: Bytes,
    account: String,
    now: Millis,
    with_content: bool,
}

/// The answer to a message's creation: the message, the first request's answer again, or a
/// conflict with the message of the same `eventId`.
async fn answer(
    state: &Arc<AppState>,
    q: &Query,
    outcome: Option<&IngestOutcome>,
    created: Created,
) -> Answer {
    let Created {
        meta,
        payload,
        account,
        now,
        with_content,
    } = created;
    match outcome {
        Some(IngestOutcome::Created {
            event_id,
            deliveries,
        }) => {
            // The receipt time as stored (a cluster's node may store a later one than `now`).
            let received_at = deliveries.first().map_or(now, |d| d.created_at);
            let meta = EventMeta {
                id: event_id.clone(),
                received_at,
                ..meta
            };
            let mut resp = crate::api::json(
                StatusCode::ACCEPTED,
                &shapes::message(&meta, &payload, with_content),
            );
            if q.request_key.is_some() {
                resp.extensions_mut().insert(super::AnswerKept);
            }
            Ok(resp)
        }
        // The same request again (its first was answered meanwhile, on another node or before
        // a restart): the first request's answer.
        Some(IngestOutcome::Repeated { event_id }) => {
            let key = q.request_key.as_deref().unwrap_or_default();
            let kept = match event_id {
                Some(event_id) => Some(ApiAnswer {
                    status: 202,
                    body: String::new(),
                    at: now,
                    event_id: Some(event_id.clone()),
                }),
                None => state.store.api_answer(&account, key, now).await?,
            };
            let kept = match kept {
                Some(a) => super::replay(state, a, q).await?,
                None => None,
            };
            let mut resp = kept.ok_or_else(crate::api::error::ApiError::unavailable)?;
            resp.extensions_mut().insert(super::AnswerKept);
            Ok(resp)
        }
        Some(IngestOutcome::Duplicate { event_id }) => Err(SvixError::conflict(format!(
            "a message with this eventId exists already in this application ({event_id})"
        ))),
        None => Err(crate::api::error::ApiError::unavailable().into()),
    }
}

/// The application's account, made from the message's `application` when there is none.
async fn account_for(
    state: &Arc<AppState>,
    app: &str,
    application: Option<&Value>,
) -> Result<String, SvixError> {
    match apps::existing(state, app).await {
        Ok(a) => Ok(a),
        Err(e) if e.status == StatusCode::NOT_FOUND => match application {
            Some(Value::Object(a)) => {
                let mut a = a.clone();
                a.entry("uid")
                    .or_insert_with(|| Value::String(app.to_string()));
                Ok(apps::create_from(state, &a, true).await?.0.id)
            }
            _ => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// The message's `eventType`: a string, required.
fn event_type_of(v: Option<Value>) -> Result<Value, SvixError> {
    match v {
        Some(v @ Value::String(_)) => Ok(v),
        Some(_) => Err(SvixError::field(
            "eventType",
            "type_error",
            "eventType must be a string",
        )),
        None => Err(SvixError::field(
            "eventType",
            "value_error.missing",
            "eventType is required",
        )),
    }
}

/// The event a message id or `eventId` names within the account, with its payload.
async fn find(
    state: &AppState,
    account: &str,
    msg: &str,
) -> Result<(EventMeta, bytes::Bytes, Vec<Delivery>), SvixError> {
    let id = if ids::is_valid(EVENT, msg) {
        Some(msg.to_string())
    } else {
        state
            .store
            .keyed_event(account, msg, state.clock.now_ms())
            .await?
    };
    let Some(id) = id else {
        return Err(SvixError::not_found("message"));
    };
    match state.store.event_with_deliveries(&id).await? {
        Some((meta, payload, deliveries)) if meta.account_id == account => {
            Ok((meta, payload, deliveries))
        }
        _ => Err(SvixError::not_found("message")),
    }
}

async fn account(state: &AppState, caller: &Caller, app: &str) -> Result<String, SvixError> {
    caller.reaches(app, true)?;
    Ok(apps::find(state, app).await?.id)
}

pub async fn get(
    state: &Arc<AppState>,
    caller: &Caller,
    app: &str,
    msg: &str,
    q: &Query,
) -> Answer {
    let account = account(state, caller, app).await?;
    let (meta, payload, _) = find(state, &account, msg).await?;
    ok(
        StatusCode::OK,
        &shapes::message(&meta, &payload, q.flag("with_content", true)?),
    )
}

/// The message-level filters of a list: `event_types`, `channel`, `tag`, `before`, `after`.
struct Filters {
    event_types: Vec<String>,
    channel: Option<String>,
    tag: Option<String>,
    before: Option<Millis>,
    after: Option<Millis>,
}

impl Filters {
    fn of(q: &Query) -> Result<Filters, SvixError> {
        Ok(Filters {
            event_types: q.all("event_types"),
            channel: q.get("channel").map(str::to_string),
            tag: q.get("tag").map(str::to_string),
            before: q.time("before")?,
            after: q.time("after")?,
        })
    }

    fn takes(&self, meta: &EventMeta) -> bool {
        (self.event_types.is_empty() || self.event_types.contains(&meta.event_type))
            && self
                .channel
                .as_ref()
                .is_none_or(|c| meta.channels.contains(c))
            && self.tag.as_ref().is_none_or(|t| meta.tags.contains(t))
            && self.before.is_none_or(|b| meta.received_at < b)
            && self.after.is_none_or(|a| meta.received_at > a)
    }

    /// The store's own filter for what it can narrow.
    fn delivery_filter(&self, account: &str, endpoint: Option<&str>) -> DeliveryFilter {
        DeliveryFilter {
            account_id: Some(account.to_string()),
            endpoint_id: endpoint.map(str::to_string),
            event_type: (self.event_types.len() == 1).then(|| self.event_types[0].clone()),
            since: self.after.map(|a| a + 1),
            until: self.before.map(|b| b - 1),
            ..DeliveryFilter::default()
        }
    }
}

/// A list read from the log comes newest first: `order=ascending` is refused, not ignored.
fn newest_first(q: &Query) -> Result<(), SvixError> {
    if q.descending(true)? {
        Ok(())
    } else {
        Err(SvixError::query(
            "order",
            "herald lists messages and an endpoint's attempts newest first only: leave order \
             out or ask descending",
        ))
    }
}

/// An iterator of this API: the last delivery read and the item it ended on.
fn iterator(delivery: &str, item: &str) -> String {
    format!("{delivery}~{item}")
}

fn parse_iterator(q: &Query) -> (Option<String>, Option<String>) {
    match q.get("iterator").and_then(|i| i.split_once('~')) {
        Some((d, item)) => (Some(d.to_string()), Some(item.to_string())),
        None => (None, None),
    }
}

/// Messages newest first: the account's deliveries read page by page, one message per event.
pub async fn list(state: &Arc<AppState>, caller: &Caller, app: &str, q: &Query) -> Answer {
    let account = account(state, caller, app).await?;
    let limit = q.limit()?;
    newest_first(q)?;
    let with_content = q.flag("with_content", true)?;
    let filters = Filters::of(q)?;
    let filter = filters.delivery_filter(&account, None);
    let (mut consumed, mut last_event) = parse_iterator(q);
    let mut data = Vec::new();
    // Where the next page goes on from: the last delivery read and the message it belongs to.
    let mut next = None;
    let mut scanned_all = false;
    'pages: for _ in 0..SCAN_PAGES {
        let (page, more) = state
            .store
            .list_deliveries(filter.clone(), SCAN_PAGE, consumed.clone())
            .await?;
        for d in &page {
            if last_event.as_deref() != Some(d.event_id.as_str()) {
                if data.len() == limit {
                    next = consumed
                        .as_ref()
                        .zip(last_event.as_ref())
                        .map(|(c, e)| iterator(c, e));
                    break 'pages;
                }
                last_event = Some(d.event_id.clone());
                if let Some((meta, payload)) = state.store.event(&d.event_id).await? {
                    if filters.takes(&meta) {
                        data.push(shapes::message(&meta, &payload, with_content));
                    }
                }
            }
            consumed = Some(d.id.clone());
        }
        if more.is_none() {
            scanned_all = true;
            break;
        }
    }
    if next.is_none() && !scanned_all {
        next = consumed
            .as_ref()
            .zip(last_event.as_ref())
            .map(|(c, e)| iterator(c, e));
    }
    ok(
        StatusCode::OK,
        &list_of(data, next, q.get("iterator").map(str::to_string)),
    )
}

/// The attempt filters: `status`, `status_code_class`, `endpoint_id`.
struct AttemptFilters {
    status: Option<u8>,
    code_class: Option<u16>,
    endpoint: Option<String>,
    expanded: bool,
}

impl AttemptFilters {
    fn of(q: &Query) -> Result<AttemptFilters, SvixError> {
        let status = q
            .get("status")
            .map(|s| match s.parse::<u8>() {
                Ok(n) if n <= 4 => Ok(n),
                _ => Err(SvixError::query("status", "status must be 0, 1, 2, 3 or 4")),
            })
            .transpose()?;
        let code_class = q
            .get("status_code_class")
            .map(|s| match s.parse::<u16>() {
                Ok(n) if [0, 100, 200, 300, 400, 500].contains(&n) => Ok(n),
                _ => Err(SvixError::query(
                    "status_code_class",
                    "status_code_class must be 0, 100, 200, 300, 400 or 500",
                )),
            })
            .transpose()?;
        Ok(AttemptFilters {
            status,
            code_class,
            endpoint: q.get("endpoint_id").map(str::to_string),
            expanded: q.flag("expanded_statuses", false)?,
        })
    }

    fn takes(&self, a: &Attempt) -> bool {
        let (status, _) = shapes::attempt_status(a.status, self.expanded);
        let code = a.http_status.unwrap_or(0);
        self.status.is_none_or(|s| s == status)
            && self.code_class.is_none_or(|c| {
                if c == 0 {
                    code == 0
                } else {
                    code / 100 * 100 == c
                }
            })
    }
}

/// `GET …/attempt/msg/{msg}`: the message's attempts, newest first.
pub async fn attempts_by_msg(
    state: &Arc<AppState>,
    caller: &Caller,
    app: &str,
    msg: &str,
    q: &Query,
) -> Answer {
    let account = account(state, caller, app).await?;
    let (meta, _, deliveries) = find(state, &account, msg).await?;
    let f = AttemptFilters::of(q)?;
    let filters = Filters::of(q)?;
    let limit = q.limit()?;
    let with_msg = q.flag("with_msg", false)?;
    let msg_out = with_msg.then(|| shapes::message_value(&meta));
    let endpoint = match &f.endpoint {
        Some(e) => Some(super::endpoints::find(state, &account, e)?.id.clone()),
        None => None,
    };
    let mut all: Vec<(Attempt, &Delivery)> = Vec::new();
    if filters.takes(&meta) {
        for d in &deliveries {
            if d.endpoint_id.is_none() || (endpoint.is_some() && d.endpoint_id != endpoint) {
                continue;
            }
            for a in state.store.attempts(&d.id).await? {
                if f.takes(&a) {
                    all.push((a, d));
                }
            }
        }
    }
    all.sort_by(|x, y| y.0.at.cmp(&x.0.at).then(y.0.id.cmp(&x.0.id)));
    if !q.descending(true)? {
        all.reverse();
    }
    let after = q.get("iterator");
    let start = after
        .and_then(|it| all.iter().position(|(a, _)| a.id == it).map(|i| i + 1))
        .unwrap_or(0);
    let page: Vec<&(Attempt, &Delivery)> = all[start..].iter().take(limit).collect();
    let next = (start + page.len() < all.len())
        .then(|| page.last().map(|(a, _)| a.id.clone()))
        .flatten();
    let data = page
        .iter()
        .map(|(a, d)| shapes::attempt(a, d, f.expanded, msg_out.clone()))
        .collect();
    ok(
        StatusCode::OK,
        &list_of(data, next, after.map(str::to_string)),
    )
}

/// `GET …/attempt/endpoint/{ep}`: the endpoint's attempts, by delivery newest first and each
/// delivery's newest first.
pub async fn attempts_by_endpoint(
    state: &Arc<AppState>,
    caller: &Caller,
    app: &str,
    ep: &str,
    q: &Query,
) -> Answer {
    let account = account(state, caller, app).await?;
    let endpoint = super::endpoints::find(state, &account, ep)?;
    newest_first(q)?;
    let f = AttemptFilters::of(q)?;
    let filters = Filters::of(q)?;
    let limit = q.limit()?;
    let with_msg = q.flag("with_msg", false)?;
    let needs_meta = with_msg
        || !filters.event_types.is_empty()
        || filters.channel.is_some()
        || filters.tag.is_some();
    let filter = DeliveryFilter {
        account_id: Some(account.clone()),
        endpoint_id: Some(endpoint.id.clone()),
        event_type: (filters.event_types.len() == 1).then(|| filters.event_types[0].clone()),
        ..DeliveryFilter::default()
    };
    // The iterator names where the last page stopped: `delivery~number`, the delivery whose
    // attempts numbered below `number` are still to come (`0`: none).
    let (resume, below) = parse_iterator(q);
    let below: Option<u32> = below.and_then(|n| n.parse().ok());
    let mut cursor = resume.clone();
    let mut page = AttemptPage {
        data: Vec::new(),
        limit,
        with_msg,
        needs_meta,
        filters: &filters,
        attempt_filters: &f,
        resume: resume.as_deref(),
        below,
    };
    let mut next = None;
    let mut scanned_all = false;
    'pages: for page_no in 0..SCAN_PAGES {
        let (listed, more) = state
            .store
            .list_deliveries(filter.clone(), SCAN_PAGE, cursor.clone())
            .await?;
        // The delivery a page stopped in is read again first, for its older attempts.
        let again = match (&resume, below) {
            (Some(d), Some(n)) if page_no == 0 && n > 0 => state.store.delivery(d).await?,
            _ => None,
        };
        for d in again.iter().chain(&listed) {
            match page.add(state, d).await? {
                Added::Full(stop) => {
                    next = Some(stop);
                    break 'pages;
                }
                // Its event is gone (purged meanwhile): the cursor stays before it.
                Added::Gone => continue,
                Added::All => cursor = Some(d.id.clone()),
            }
        }
        if more.is_none() {
            scanned_all = true;
            break;
        }
    }
    if next.is_none() && !scanned_all {
        next = cursor.map(|c| iterator(&c, "0"));
    }
    ok(
        StatusCode::OK,
        &list_of(page.data, next, q.get("iterator").map(str::to_string)),
    )
}

/// A page of an endpoint's attempts being filled, newest first.
struct AttemptPage<'a> {
    data: Vec<Value>,
    limit: usize,
    with_msg: bool,
    /// Whether each delivery's event is read (to filter on it, or to show it).
    needs_meta: bool,
    filters: &'a Filters,
    attempt_filters: &'a AttemptFilters,
    /// The delivery the last page stopped in, and the attempt number it stopped below.
    resume: Option<&'a str>,
    below: Option<u32>,
}

impl AttemptPage<'_> {
    /// Adds the delivery's attempts that the filters take.
    async fn add(&mut self, state: &AppState, d: &Delivery) -> Result<Added, SvixError> {
        let meta = if self.needs_meta {
            match state.store.event(&d.event_id).await? {
                Some((m, _)) => Some(m),
                None => return Ok(Added::Gone),
            }
        } else {
            None
        };
        let mut attempts = if meta.as_ref().is_some_and(|m| !self.filters.takes(m)) {
            Vec::new()
        } else {
            state.store.attempts(&d.id).await?
        };
        attempts.reverse();
        let resumed = Some(d.id.as_str()) == self.resume;
        for a in attempts {
            if resumed && self.below.is_some_and(|n| a.number >= n) {
                continue;
            }
            if self.filters.before.is_some_and(|b| a.at >= b)
                || self.filters.after.is_some_and(|x| a.at <= x)
                || !self.attempt_filters.takes(&a)
            {
                continue;
            }
            if self.data.len() == self.limit {
                return Ok(Added::Full(iterator(&d.id, &(a.number + 1).to_string())));
            }
            let msg = if self.with_msg {
                meta.as_ref().map(shapes::message_value)
            } else {
                None
            };
            self.data
                .push(shapes::attempt(&a, d, self.attempt_filters.expanded, msg));
        }
        Ok(Added::All)
    }
}

/// What [`AttemptPage::add`] did with a delivery.
enum Added {
    /// Every attempt it had to give.
    All,
    /// None: its event is gone.
    Gone,
    /// The page filled up before its attempt numbered below this iterator's.
    Full(String),
}

/// `POST …/msg/{msg}/endpoint/{ep}/resend`: herald's manual retry of that delivery.
pub async fn resend(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
    msg: &str,
    ep: &str,
) -> Answer {
    crate::api::body::discard_body(req).await;
    caller.reaches(app, false)?;
    let account = apps::find(state, app).await?.id;
    let (_, _, deliveries) = find(state, &account, msg).await?;
    let endpoint = super::endpoints::find(state, &account, ep)?;
    let d = deliveries
        .iter()
        .find(|d| d.endpoint_id.as_deref() == Some(endpoint.id.as_str()))
        .ok_or_else(|| SvixError::not_found("the message was not sent to this endpoint"))?;
    match state.engine.retry_now(&d.id).await {
        Ok(_) => ok(StatusCode::ACCEPTED, &json!({})),
        Err(crate::engine::RetryError::NotFound) => Err(SvixError::not_found("message")),
        Err(crate::engine::RetryError::InFlight) => Err(SvixError::conflict(
            "an attempt of this message to this endpoint is running now; resend once it has finished",
        )),
        Err(crate::engine::RetryError::Store(e)) => Err(e.into()),
    }
}
