// Live updates: the server tells this page when an approval changed, and
// the page fetches itself again and swaps in each region marked data-live
// whose version moved, leaving the rest (a reason being typed) alone.
// Without this script every page works the same, one reload at a time.
(function () {
  'use strict';
  if (!window.EventSource || !window.fetch || !window.DOMParser) return;
  var status = document.getElementById('live-status');
  var refresh = function () {
    fetch(location.href, { credentials: 'same-origin', headers: { 'X-Console-Refresh': '1' } })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, 'text/html');
        document.querySelectorAll('[data-live]').forEach(function (old) {
          var next = fresh.getElementById(old.id);
          if (next && next.getAttribute('data-live') !== old.getAttribute('data-live')) old.replaceWith(next);
        });
      })
      .catch(function () {});
  };
  var source = new EventSource('/console/events');
  // Whenever the stream opens, first or again after it dropped, a page
  // with live regions catches up on what changed since it was rendered: a
  // change made before the stream listened sends it no event. (A page
  // without them, such as the passkey page, is never fetched again: its
  // render holds a one-time challenge.) The page then says it listens;
  // tests wait for that before they act.
  var live = document.querySelector('[data-live]') !== null;
  source.addEventListener('open', function () {
    if (live) refresh();
    document.documentElement.setAttribute('data-live', 'open');
  });
  source.addEventListener('change', function (e) {
    if (status) status.textContent = e.data;
    refresh();
  });
})();
