// Talks to the user API with the token the user entered once. The token lives in localStorage and travels only
// in the Authorization header: never in a URL, so it reaches neither access logs nor the browser history.
const TOKEN_KEY = "spotrun.token";
const LOGIN_NOTE_KEY = "spotrun.loginNote";
export const POLL_MS = 3000;

// Where the dashboard and the API are, from this page's own address: a proxy may serve spotrun under a path
// prefix (https://example.org/spotrun/dashboard/), so no page names an absolute path.
const MARK = "/dashboard/";
export const DASHBOARD = location.pathname.slice(0, location.pathname.lastIndexOf(MARK) + MARK.length);
const API = `${DASHBOARD.slice(0, -MARK.length)}/api/v1`;

export class Unauthorized extends Error {}
export class NotFound extends Error {}

export function hasToken() {
  return Boolean(localStorage.getItem(TOKEN_KEY));
}

export function saveToken(token) {
  localStorage.setItem(TOKEN_KEY, token);
}

// Back to the login page, forgetting the token; `note` is shown there once (e.g. why the token was dropped).
export function toLogin(note = "") {
  localStorage.removeItem(TOKEN_KEY);
  if (note) sessionStorage.setItem(LOGIN_NOTE_KEY, note);
  location.replace(`${DASHBOARD}login`);
}

export function takeLoginNote() {
  const note = sessionStorage.getItem(LOGIN_NOTE_KEY) || "";
  sessionStorage.removeItem(LOGIN_NOTE_KEY);
  return note;
}

// A request to {prefix}/api/v1{path} carrying the token in the Authorization header (no cookie); a 401 throws Unauthorized.
async function apiFetch(path, token, { method = "GET", body = undefined } = {}) {
  if (!token) throw new Unauthorized("no token entered");
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`${API}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 401) throw new Unauthorized("the server refused the token");
  return response;
}

// GET /api/v1{path}; `token` overrides the stored one (the login form checks a token before keeping it).
export async function apiGet(path, { token = localStorage.getItem(TOKEN_KEY) } = {}) {
  const response = await apiFetch(path, token);
  if (response.status === 404) throw new NotFound(`${path}: not found`);
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response;
}

// POST /api/v1{path} with an optional JSON body. Answers {ok, status, answer} whatever the status (but 401), so a
// page can show the API's own words, e.g. 409 {"detail": "job 7 has already ended"}.
export async function apiPost(path, body = undefined) {
  const response = await apiFetch(path, localStorage.getItem(TOKEN_KEY), { method: "POST", body });
  const answer = await response.json().catch(() => null);  // a proxy's error page is not JSON
  return { ok: response.ok, status: response.status, answer };
}

export async function apiJson(path) {
  return (await apiGet(path)).json();
}

// Calls `tick` now and then every POLL_MS after each one finishes, until it returns false. A refused token sends
// the user to the login page; other errors are shown by `onError` and the polling goes on (the server may restart).
export function poll(tick, onError) {
  const step = async () => {
    let again = true;
    try {
      again = (await tick()) !== false;
    } catch (error) {
      if (error instanceof Unauthorized) {
        toLogin("The server refused the stored token; enter a valid one.");
        return;
      }
      again = onError(error) !== false;
    }
    if (again) setTimeout(step, POLL_MS);
  };
  step();
}

export function setUpPage() {
  if (!hasToken()) {
    toLogin();
    return false;
  }
  document.getElementById("logout").addEventListener("click", () => toLogin("Logged out."));
  return true;
}
