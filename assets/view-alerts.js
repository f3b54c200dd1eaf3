// herald pages: the account's failure alert addresses (docs/operations.md, "Failure alerts").

import { api, enc } from "./api.js";
import { h, put } from "./dom.js";
import { mono } from "./format.js";
import { account, action, button, details, errorBox, field, fieldError, loading, msg, readOnly, reasonWords } from "./pieces.js";
import { viewShell } from "./shell.js";
import { APP, main } from "./state.js";
import { needAccount } from "./view-endpoints.js";

// At most this many addresses per account (the API refuses more).
const MAX = 5;

const ABOUT = "We mail these addresses when an endpoint of this account starts failing, " +
  "is disabled, and recovers — at most one “failing” mail per endpoint in the interval the " +
  "operator sets. A mail names the endpoint, its last error and how many deliveries wait; " +
  "never a secret, a header or a payload.";

export async function viewAlerts(ctx) {
  const acc = account();
  if (!acc) return needAccount("Alerts");
  viewShell("Alerts", loading());
  const a = await api("GET", `/v1/accounts/${enc(acc)}`);
  if (ctx.stale()) return;
  const emails = a.alert_emails || [];
  const head = [main.querySelector("h1"), h("p", { class: "sub" }, ABOUT),
    APP === "console" ? h("p", { class: "muted" }, "Account ", mono(acc)) : null];
  if (readOnly()) {
    put(main, ...head,
      emails.length
        ? h("ul", { class: "plain", "aria-label": "Alert addresses" }, emails.map((e) => h("li", null, mono(e))))
        : h("p", { class: "empty" }, "No alert addresses yet: nobody is mailed when an endpoint fails."),
      h("p", { class: "hint" }, "This is a read-only session: it cannot change the addresses."));
    return;
  }
  const inputs = Array.from({ length: MAX }, (_, i) => h("input", {
    type: "email", id: `f-alert-${i}`, name: `alert-${i}`, value: emails[i] || "", class: "mono",
    autocomplete: "email", spellcheck: "false", placeholder: i === 0 ? "ops@example.com" : "",
  }));
  const out = h("div", { "aria-live": "polite" });
  const submit = button("Save", null, { type: "submit", kind: "primary" });
  // The browser's own address check is off: herald's answer names the field it refuses.
  const form = h("form", { class: "card", novalidate: true },
    h("fieldset", null, h("legend", null, "Alert addresses"),
      inputs.map((input, i) => field(`Address ${i + 1}`, input, i === 0 ? "Empty fields are left out; save with all empty to stop the mails." : null))),
    h("div", { class: "actions" }, submit), out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    for (const x of form.querySelectorAll("[aria-invalid]")) x.removeAttribute("aria-invalid");
    // The list sent, and which input each entry came from (for the API's field errors).
    const sent = inputs.map((input, i) => [input.value.trim(), i]).filter(([v]) => v);
    submit.disabled = true;
    put(out, loading("Saving…"));
    try {
      const r = await api("PUT", `/v1/accounts/${enc(acc)}`, { alert_emails: sent.map(([v]) => v) });
      const saved = r.alert_emails || [];
      inputs.forEach((input, i) => { input.value = saved[i] || ""; });
      put(out, msg("ok", saved.length ? `Saved: ${saved.length} address${saved.length === 1 ? "" : "es"}.` : "Saved: no addresses, nobody is mailed."));
    } catch (err) {
      // At the address it is about, in plain words; the API's sentence behind "Details".
      const m = /^alert_emails\[(\d+)\]$/.exec(err.field || "");
      const el = m && sent[Number(m[1])] ? inputs[sent[Number(m[1])][1]] : err.field === "alert_emails" ? inputs[0] : null;
      if (el) {
        fieldError(el, reasonWords(err) || "This is not an address we can mail.", err.message);
        put(out, msg("error", "Check the highlighted address."));
      } else {
        put(out, errorBox(err));
      }
    } finally {
      submit.disabled = false;
    }
  });
  put(main, ...head, form, testCard(acc));
}

// What a refused test mail means, by the API's code (docs/api.md, "Accounts").
const TEST_WORDS = {
  alerts_off: "Alert mails are off: the platform has not set up a mail server for them yet.",
  no_alert_emails: "Save an address first: the test mail goes to the saved addresses.",
  alert_cap_reached: "This account had as many alert mails this hour as it may get; try again next hour.",
  mail_not_sent: "The mail server did not take the test mail.",
};

// "Send test alert": one mail to the saved addresses now, and what became of it.
function testCard(acc) {
  const out = h("div", { "aria-live": "polite" });
  const send = action("Send test alert", async () => {
    put(out, loading("Sending…"));
    try {
      const r = await api("POST", `/v1/accounts/${enc(acc)}/alerts/test`);
      put(out, msg("ok", `Sent to ${r.sent_to.join(", ")}. It should arrive within a minute; check the spam folder if it does not.`));
    } catch (err) {
      const words = err.code && TEST_WORDS[err.code];
      put(out, words ? msg("error", words, err.code === "mail_not_sent" ? details(err.message) : null) : errorBox(err));
    }
  });
  return h("section", { class: "card", "aria-labelledby": "alerts-test-h" },
    h("h2", { id: "alerts-test-h" }, "Test"),
    h("p", { class: "hint" }, "Mail the saved addresses now, to check the mails reach them. " +
      "A test mail counts toward the mails this account may get in an hour."),
    h("div", { class: "actions" }, send), out);
}
