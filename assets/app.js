/* herald pages: the portal (a customer's webhooks, one account) and the console (the operator).
 *
 * One set of ES modules for both pages (<body data-app="portal|console">), no framework, no
 * build step: this entry starts the shell (shell.js), which shows the view of each route
 * (view-*.js) with the pieces (pieces.js, dom.js, format.js, chart.js), the API client (api.js)
 * and the state every part shares (state.js).
 *
 * The pages hold no data: everything comes from herald's JSON API with the token kept in
 * sessionStorage. Rules kept throughout:
 * - data is always text: textContent / createTextNode, never innerHTML (payloads, headers and
 *   response bodies are shown as the characters they are);
 * - no inline style or script (the CSP forbids them): looks come from classes in app.css, and
 *   the charts are SVG built with attributes;
 * - every view has its own hash URL (#/deliveries/dlv_...), so it can be shared and reloaded.
 */

import { boot } from "./shell.js";

boot();
