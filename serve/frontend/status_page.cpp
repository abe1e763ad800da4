// status_page.cpp — status_page.hpp.
#include "frontend/status_page.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "frontend/context.hpp"
#include "loom/markup.hpp"

namespace loom::serve {
namespace {

using json = nlohmann::json;

std::string esc(const std::string& s) { return markup_text(s); }  // names come from files and clients

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string clock_time(double unix_s) {
  char b[32];
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(b, sizeof b, "%H:%M:%S", &tm);
  return b;
}

// Replicas (ready and in all) and demand over the last hour: polylines on a 600 x 160 chart.
std::string chart(const json& history) {
  if (!history.is_array() || history.size() < 2) return "<p>The chart fills in as the controller ticks.</p>";
  const double t0 = history.front()[0].get<double>(), t1 = std::max(t0 + 1, history.back()[0].get<double>());
  double top = 1;
  for (const auto& h : history) top = std::max({top, h[2].get<double>(), h[3].get<double>()});
  std::ostringstream svg;
  svg << "<svg id=\"chart\" width=\"600\" height=\"180\" viewBox=\"0 0 600 180\" role=\"img\">"
      << "<rect x=\"40\" y=\"10\" width=\"550\" height=\"140\" fill=\"#f7f9fb\" stroke=\"#ccd\"/>";
  const char* colours[] = {"", "#2a7a2a", "#7a8aa0", "#c0561f"};
  for (int k : {2, 1, 3}) {
    svg << "<polyline fill=\"none\" stroke=\"" << colours[k] << "\" stroke-width=\"2\" points=\"";
    for (const auto& h : history)
      svg << 40 + 550 * (h[0].get<double>() - t0) / (t1 - t0) << "," << 150 - 140 * h[k].get<double>() / top << " ";
    svg << "\"/>";
  }
  svg << "<text x=\"4\" y=\"18\" font-size=\"11\">" << top << "</text><text x=\"4\" y=\"150\" font-size=\"11\">0</text>"
      << "<text x=\"40\" y=\"168\" font-size=\"11\">" << clock_time(t0) << "</text><text x=\"540\" y=\"168\" font-size=\"11\">"
      << clock_time(t1) << " UTC</text></svg>"
      << "<p class=\"key\"><span style=\"color:#2a7a2a\">&#9632; ready</span> <span style=\"color:#7a8aa0\">&#9632; "
         "replicas</span> <span style=\"color:#c0561f\">&#9632; demand (requests in flight)</span></p>";
  return svg.str();
}

std::string controller_body(const json& s) {
  std::ostringstream b;
  const json& svc = s["service"];
  int ready = 0;
  for (const auto& r : s["replicas"]) ready += r["state"] == "ready";
  b << "<h1>InferenceService " << esc(text(svc["name"])) << "</h1><p id=\"summary\">" << ready << " ready of "
    << s["replicas"].size() << " replicas; the autoscaler wants " << svc["desired"] << " (min " << svc["min_replicas"] << ", max "
    << svc["max_replicas"] << ")" << (svc["panic"].get<bool>() ? ", in its panic window" : "") << "; " << s["rejected"]
    << " requests refused</p><h2>Replicas</h2><table id=\"replicas\"><tr><th>Slurm job</th><th>node</th><th>state</th>"
       "<th>in flight</th><th>routed</th><th>since (UTC)</th></tr>";
  for (const auto& r : s["replicas"])
    b << "<tr class=\"replica " << esc(text(r["state"])) << "\"><td>" << esc(text(r["job"])) << "</td><td>" << esc(text(r["node"]))
      << "</td><td>" << esc(text(r["state"])) << (text(r["reason"]).empty() ? "" : " (" + esc(text(r["reason"])) + ")")
      << "</td><td>" << r["outstanding"] << "</td><td>" << r["routed"] << "</td><td>" << clock_time(r["since"].get<double>())
      << "</td></tr>";
  b << "</table><h2>The last hour</h2>" << chart(s["history"]) << "<h2>Scale events</h2><ul id=\"events\">";
  for (auto it = s["events"].rbegin(); it != s["events"].rend(); ++it)
    b << "<li>" << clock_time((*it)["time"].get<double>()) << " UTC: " << (*it)["from"] << " &rarr; " << (*it)["to"]
      << ((*it)["panic"].get<bool>() ? " (panic)" : "") << ": " << esc(text((*it)["reason"])) << "</li>";
  b << "</ul>";
  return b.str();
}

std::string server_body(const json& s) {
  std::ostringstream b;
  b << "<h1>loom-serve</h1><h2>Models</h2><table id=\"models\"><tr><th>model</th><th>version</th><th>state</th><th>why</th></tr>";
  for (const auto& m : s["models"])
    b << "<tr class=\"model\"><td>" << esc(text(m["name"])) << "</td><td>" << esc(text(m["version"])) << "</td><td>"
      << esc(text(m["state"])) << "</td><td>" << esc(text(m["reason"])) << "</td></tr>";
  b << "</table>";
  return b.str();
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccd;"
    "padding:3px 8px;text-align:left}tr.ready td{background:#eef8ee}tr.pending td,tr.starting td{background:#fff8e6}"
    "tr.draining td{background:#f4f4f4}.key span{margin-right:1em}";

// Every 3 s: the page again (with the token the form kept, as a bearer token), its #status swapped in.
constexpr const char* kScript =
    "const tok=()=>sessionStorage.getItem('loom-token');"
    "async function refresh(){const h=tok()?{Authorization:'Bearer '+tok()}:{};"
    "const r=await fetch('/',{headers:h});if(!r.ok)return;"
    "const d=new DOMParser().parseFromString(await r.text(),'text/html');"
    "const s=d.getElementById('status');if(s)document.getElementById('status').replaceWith(s);}"
    "document.getElementById('login')?.addEventListener('submit',e=>{e.preventDefault();"
    "sessionStorage.setItem('loom-token',document.getElementById('token').value);refresh();});"
    "setInterval(refresh,3000);if(tok())refresh();";

}  // namespace

json status_json(const Context& ctx) {
  if (ctx.status) return ctx.status();
  json models = json::array();
  for (const auto& st : ctx.repository_index())
    models.push_back({{"name", st.name}, {"version", st.version}, {"state", st.state}, {"reason", st.reason}});
  return {{"models", models}};
}

std::string status_page(const json& status) {
  std::string body;
  if (status.is_null())
    body = "<form id=\"login\"><label>This server needs its token: <input id=\"token\" type=\"password\" "
           "autocomplete=\"off\"></label> <button>Show</button></form>";
  else
    body = status.contains("service") ? controller_body(status) : server_body(status);
  return std::string("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Loom status</title><style>") + kStyle +
         "</style></head><body><div id=\"status\">" + body +
         "<p><a href=\"/metrics\">/metrics</a> &middot; <a href=\"/v2/status\">/v2/status</a></p></div><script>" + kScript +
         "</script></body></html>";
}

}  // namespace loom::serve
