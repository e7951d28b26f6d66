// Passkeys: register one on the passkey page, and sign a decision with it
// on the page of an approval whose rule requires it. The server gives the
// options and the challenges; the script only carries the browser's
// answer back in the form.
(function () {
  'use strict';
  var problem = function (form, text) {
    var p = form.querySelector('.passkey-problem');
    if (p) {
      p.textContent = text;
      p.hidden = false;
    }
  };
  var supported = function (form) {
    if (window.PublicKeyCredential && PublicKeyCredential.parseCreationOptionsFromJSON) return true;
    problem(form, 'This browser cannot use passkeys. Open the console in a current browser, at https:// or http://localhost.');
    return false;
  };
  // The buttons swap in and out with live updates, so the page listens
  // to every form's submission rather than to one form.
  document.addEventListener('submit', function (e) {
    var form = e.target;
    if (form.id === 'passkey-register') {
      e.preventDefault();
      if (!supported(form)) return;
      var options = PublicKeyCredential.parseCreationOptionsFromJSON(JSON.parse(form.dataset.options));
      navigator.credentials.create({ publicKey: options }).then(function (credential) {
        form.elements.credential.value = JSON.stringify(credential.toJSON());
        form.submit();
      }).catch(function () {
        problem(form, 'No passkey was created. Try again, and confirm when the browser asks.');
      });
      return;
    }
    if (!form.hasAttribute('data-passkey')) return;
    e.preventDefault();
    if (!supported(form)) return;
    var decision = e.submitter && e.submitter.value === 'deny' ? 'deny' : 'approve';
    var request = PublicKeyCredential.parseRequestOptionsFromJSON({
      challenge: decision === 'approve' ? form.dataset.challengeApprove : form.dataset.challengeDeny,
      rpId: form.dataset.rpId,
      allowCredentials: form.dataset.credentials.split(',').map(function (id) { return { type: 'public-key', id: id }; }),
      userVerification: 'required',
      timeout: 120000,
    });
    navigator.credentials.get({ publicKey: request }).then(function (assertion) {
      form.elements.assertion.value = JSON.stringify(assertion.toJSON());
      var chosen = document.createElement('input');
      chosen.type = 'hidden';
      chosen.name = 'decision';
      chosen.value = decision;
      form.appendChild(chosen);
      form.submit();
    }).catch(function () {
      problem(form, 'Your passkey did not sign the decision, so nothing was decided. Try again.');
    });
  });
})();
