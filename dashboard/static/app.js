// The dashboard's only script: refreshes the counts, paused badges and
// charts every few seconds from the JSON endpoints, building the rows with
// textContent (never HTML), ticks "select all" on the dead letters page,
// and continues a bulk action step after step until it is done or stopped.
(function () {
  "use strict";
  var base = document.body.getAttribute("data-base") || "";
  var every = 3000;

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  // vis writes what a page would not show as itself (control characters,
  // bidirectional controls, which reorder what the operator reads) as Go
  // escapes (\x1b, \u202e), as the server's pages do: names come from
  // whoever published.
  function vis(s) {
    return String(s).replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, function (c) {
      var n = c.charCodeAt(0), h = n.toString(16);
      return n < 0x100 ? "\\x" + ("0" + h).slice(-2) : "\\u" + ("000" + h).slice(-4);
    });
  }
  function link(href, text) {
    var a = el("a", vis(text));
    a.href = href;
    return a;
  }
  function q(params) {
    return Object.keys(params).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]);
    }).join("&");
  }
  function ready(n) { return n < 0 ? "?" : n; }
  function num(text) { return el("td", text, "n"); }

  function poll(url, apply) {
    var live = document.getElementById("live");
    function tick() {
      fetch(url, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
        .then(function (data) { apply(data); if (live) live.classList.remove("stale"); })
        .catch(function () { if (live) live.classList.add("stale"); })
        .then(function () { setTimeout(tick, every); });
    }
    setTimeout(tick, every);
  }

  // groupCell is a group's name (a link to its page on a topic's page),
  // with a badge while it is paused.
  function groupCell(g, topic) {
    var td = el("td");
    if (topic) {
      var a = link(base + "/group?" + q({ t: topic, g: g.group }), g.group);
      a.className = "group-link";
      td.appendChild(a);
    } else {
      td.textContent = vis(g.group);
    }
    if (g.paused) {
      var tag = el("span", "paused", "tag paused");
      tag.title = "paused: its subscribers fetch no new messages";
      td.appendChild(document.createTextNode(" "));
      td.appendChild(tag);
    }
    if (g.stuck && g.stuck.length && topic) {
      var stuck = link(base + "/group?" + q({ t: topic, g: g.group, view: "consumers" }), g.stuck.length + " stuck");
      stuck.className = "tag stuck";
      stuck.title = "consumers holding messages with no lease renewal for twice the visibility timeout: " + g.stuck.join(", ");
      td.appendChild(document.createTextNode(" "));
      td.appendChild(stuck);
    }
    return td;
  }
  function hidden(form, name, value) {
    var i = el("input");
    i.type = "hidden";
    i.name = name;
    i.value = value;
    form.appendChild(i);
  }
  // actionCell is the pause or resume form of a group, as the server draws
  // it (only when the table carries a token: not in read-only mode).
  function actionCell(table, topic, g) {
    var td = el("td"), form = el("form", null, "inline");
    form.method = "post";
    form.action = table.getAttribute("data-action");
    hidden(form, "csrf", table.getAttribute("data-csrf"));
    hidden(form, "t", topic);
    hidden(form, "g", g.group);
    var b = el("button", g.paused ? "Resume" : "Pause…", g.paused ? "resume" : "pause");
    b.type = "submit";
    b.name = "action";
    b.value = g.paused ? "resume" : "pause";
    b.setAttribute("data-group", g.group);
    form.appendChild(b);
    td.appendChild(form);
    return td;
  }

  function groupLink(topic, group, view, n) {
    var td = el("td", null, "n");
    td.appendChild(link(base + "/group?" + q({ t: topic, g: group, view: view }), n));
    return td;
  }

  function deadLink(topic, group, n) {
    var td = el("td", null, "n");
    td.appendChild(link(base + "/dead?" + q({ t: topic, g: group }), n));
    return td;
  }

  var topics = document.getElementById("topics");
  if (topics) {
    poll(topics.getAttribute("data-poll"), function (data) {
      var body = el("tbody");
      data.topics.forEach(function (t) {
        var groups = t.groups.length ? t.groups : [null];
        groups.forEach(function (g, i) {
          var tr = el("tr");
          if (i === 0) {
            var name = el("td");
            name.appendChild(link(base + "/topic?" + q({ t: t.topic }), t.topic));
            if (t.alert) {
              var tag = el("span", "no scheduler", "tag unscheduled");
              tag.title = t.alert;
              name.appendChild(document.createTextNode(" "));
              name.appendChild(tag);
            }
            var cells = [name, num(t.partitions), num(t.waiting)];
            cells.forEach(function (c) { c.rowSpan = groups.length; tr.appendChild(c); });
          }
          if (g === null) {
            var none = el("td", "no consumer group yet", "none");
            if (t.no_group) {
              var unread = el("span", t.stream + " ready, unread", "tag unscheduled no-group");
              unread.title = t.no_group;
              none.appendChild(document.createTextNode(" "));
              none.appendChild(unread);
            }
            none.colSpan = 6;
            tr.appendChild(none);
          } else {
            tr.appendChild(groupCell(g, t.topic));
            tr.appendChild(num(ready(g.ready)));
            tr.appendChild(num(g.pending));
            tr.appendChild(num(g.retry));
            tr.appendChild(deadLink(t.topic, g.group, g.dead));
            tr.appendChild(num(g.consumers));
          }
          body.appendChild(tr);
        });
      });
      if (!data.topics.length) {
        var tr = el("tr"), td = el("td", "No topics under this key prefix yet.", "none");
        td.colSpan = 9;
        tr.appendChild(td);
        body.appendChild(tr);
      }
      topics.replaceChild(body, topics.tBodies[0]);
    });
  }

  var topic = document.getElementById("topic-poll");
  if (topic) {
    poll(topic.getAttribute("data-poll"), function (data) {
      var st = data.stats;
      document.getElementById("partitions").textContent = st.partitions;
      document.getElementById("waiting").textContent = st.waiting;
      document.getElementById("stream").textContent = st.stream;
      var alert = document.getElementById("sched-alert");
      if (alert) {
        alert.textContent = st.alert;
        alert.hidden = !st.alert;
      }
      var noGroup = document.getElementById("group-alert");
      if (noGroup) {
        noGroup.textContent = st.no_group;
        noGroup.hidden = !st.no_group;
      }
      var groups = document.getElementById("groups");
      var body = el("tbody");
      st.groups.forEach(function (g) {
        var tr = el("tr");
        tr.appendChild(groupCell(g, st.topic));
        tr.appendChild(groupLink(st.topic, g.group, "ready", ready(g.ready)));
        tr.appendChild(groupLink(st.topic, g.group, "pending", g.pending));
        tr.appendChild(groupLink(st.topic, g.group, "retrying", g.retry));
        tr.appendChild(deadLink(st.topic, g.group, g.dead));
        tr.appendChild(groupLink(st.topic, g.group, "consumers", g.consumers));
        tr.appendChild(el("td", g.grouped, "n grouped"));
        tr.appendChild(el("td", g.active_groups, "n active-groups"));
        tr.appendChild(el("td", g.delivered_rate, "n rate delivered-rate"));
        tr.appendChild(el("td", g.dead_rate, "n rate dead-rate"));
        if (groups.hasAttribute("data-csrf")) tr.appendChild(actionCell(groups, st.topic, g));
        body.appendChild(tr);
      });
      if (st.groups.length) groups.replaceChild(body, groups.tBodies[0]);
      var max = 0;
      data.histogram.forEach(function (b) { max = Math.max(max, b.count); });
      var bars = document.querySelectorAll("#histogram .bar");
      data.histogram.forEach(function (b, i) {
        if (!bars[i]) return;
        bars[i].querySelector(".fill").className = "fill w" + (max ? Math.floor(b.count * 100 / max) : 0);
        bars[i].querySelector(".count").textContent = b.count;
      });
      // The charts are drawn by the server: swap their points and labels.
      (data.charts || []).forEach(function (c) {
        var fig = document.getElementById(c.id);
        if (!fig) return;
        fig.classList.toggle("collecting", !!c.empty);
        fig.querySelector(".collect-note").textContent = c.empty;
        fig.querySelector(".ymax").textContent = c.ymax;
        fig.querySelector(".since").textContent = c.since;
        fig.querySelector(".empty").textContent = c.empty;
        var lines = fig.querySelectorAll("polyline"), last = fig.querySelectorAll(".last");
        c.lines.forEach(function (l, i) {
          if (lines[i]) lines[i].setAttribute("points", l.points);
          if (last[i]) last[i].textContent = l.last;
        });
      });
    });
  }

  // A bulk action runs in steps, one request each: its page carries the
  // cursor to go on from in a form, submitted again at once until the
  // server answers with the result. Stop halts it; Continue resumes.
  var cont = document.getElementById("bulk-continue-form");
  if (cont) {
    var stop = document.getElementById("bulk-stop");
    var timer = setTimeout(function () { timer = null; cont.submit(); }, 150);
    stop.hidden = false;
    // Continue pressed by hand: no second request from the timer.
    cont.addEventListener("submit", function () { if (timer) clearTimeout(timer); timer = null; });
    stop.addEventListener("click", function () {
      if (timer) clearTimeout(timer);
      timer = null;
      window.stop(); // a step already sent: stop waiting for it
      stop.hidden = true;
      document.getElementById("bulk-status").appendChild(document.createTextNode(" Stopped: Continue goes on from here."));
    });
  }

  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll("input.pick").forEach(function (c) { c.checked = all.checked; });
    });
  }
})();
