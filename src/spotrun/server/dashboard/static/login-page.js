import { DASHBOARD, Unauthorized, apiGet, saveToken, takeLoginNote } from "./api.js";

const TOKEN_MARK = "spr_";

async function logIn(event) {
  event.preventDefault();
  const input = document.getElementById("token");
  const error = document.getElementById("login-error");
  const token = input.value.trim();
  error.textContent = "";
  if (!token.startsWith(TOKEN_MARK)) {
    error.textContent = `That is not an API token: tokens start with "${TOKEN_MARK}".`;
    return;
  }
  try {
    await apiGet("/jobs", { token });  // check it before keeping it
  } catch (problem) {
    error.textContent = problem instanceof Unauthorized
      ? "The server refused this token (unknown or revoked)."
      : `Could not reach the server: ${problem.message}`;
    return;
  }
  input.value = "";
  saveToken(token);
  location.replace(DASHBOARD);
}

document.getElementById("login-note").textContent = takeLoginNote();
document.getElementById("login-form").addEventListener("submit", logIn);
