//! The ACME thread: off the workers, on its own current-thread runtime. At start (and at each
//! reload) the stored certificates are read and served at once ([`prepare`]); the thread
//! then orders what is missing and renews what is due: at two thirds of the lifetime (less a
//! little jitter), or at a random time in the CA's ARI window (RFC 9773) when it has one.
//! A failure is retried after 1, 10 and 100 minutes, then every 6 hours, each wait jittered;
//! the certificate already served keeps serving meanwhile.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::sign::CertifiedKey;
use tokio::sync::{mpsc, oneshot};

use super::state::{StateDir, Stored};
use super::{AcmeSettings, Challenge, Status};

/// Waits after the 1st, 2nd, 3rd and later failures in a row, in seconds.
const BACKOFF: [i64; 4] = [60, 600, 6000, 21_600];
/// The wait, in seconds, after one of the first [`BAD_NONCE_FAILURES`] failures in a row
/// that the CA's refusal of a nonce ended. The ACME client retries a refused request with
/// the fresh nonce the refusal carries (RFC 8555 section 6.5) twice; a CA that refuses three
/// in a row (Pebble refuses 5% of good nonces on purpose) says nothing about the next
/// attempt, which is not put off by the backoff for it.
const BAD_NONCE_WAIT: i64 = 2;
const BAD_NONCE_FAILURES: u32 = 3;
/// How long an order may take from the challenges being ready to the certificate.
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);
/// The longest one attempt (or one ARI question) may take before it counts as failed.
const WORK_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a lock another instance holds is tried again.
const LOCK_RETRY: i64 = 2;

/// The running ACME thread; dropping it stops the thread.
pub struct Manager {
    updates: mpsc::UnboundedSender<Prepared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A config's ACME settings with its stored certificates read (and served).
pub struct Prepared {
    settings: AcmeSettings,
    state: StateDir,
    certs: Vec<Managed>,
}

/// One certificate the thread looks after.
struct Managed {
    names: Vec<String>,
    stored: Option<Stored>,
    /// When to renew (seconds since the epoch; 0: now).
    renew_at: i64,
    /// When to ask the CA's ARI again (0: not yet asked).
    ari_at: i64,
    status: Status,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Manager {
    /// Starts the thread on prepared settings (see [`prepare`]).
    pub fn start(prepared: Prepared) -> std::io::Result<Manager> {
        tracing::info!(
            "ACME: certificates from {}, answering {} challenges",
            prepared.settings.directory,
            match prepared.settings.challenge {
                Challenge::Http01 => "HTTP-01 (plain listeners)",
                Challenge::TlsAlpn01 => "TLS-ALPN-01 (TLS listeners)",
            }
        );
        let (updates, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("acme".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => {
                        rt.block_on(run(prepared, rx, stopped));
                        // A name lookup still blocking cannot hold up a reload or a stop.
                        rt.shutdown_timeout(Duration::from_secs(1));
                    }
                    Err(e) => tracing::error!("ACME: cannot start its runtime: {e}"),
                }
            })?;
        Ok(Manager {
            updates,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Hands a reloaded config's settings to the thread.
    pub fn update(&self, prepared: Prepared) {
        let _ = self.updates.send(prepared);
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads the state directory for `settings` and serves what it holds: each stored
/// certificate still valid for its names, else a self-signed placeholder when configured.
/// A state file that does not read back is an error naming it (nothing is ordered over it).
pub fn prepare(settings: &AcmeSettings) -> Result<Prepared, String> {
    let state = StateDir::open(&settings.state_dir, &settings.directory)?;
    state.read_account()?;
    let mut stored = Vec::new();
    for names in &settings.certificates {
        stored.push(state.read_cert(&names[0])?);
    }
    let all: Vec<String> = settings.certificates.iter().flatten().cloned().collect();
    super::retain(&all);
    super::share_tokens(Some(state.tokens_dir()));
    let mut certs = Vec::new();
    for (names, s) in settings.certificates.iter().zip(stored) {
        certs.push(Managed::new(names.clone(), s, settings.placeholder)?);
    }
    super::publish(certs.iter().map(|m| m.status.clone()).collect());
    Ok(Prepared {
        settings: settings.clone(),
        state,
        certs,
    })
}

/// Serves no ACME certificate any more (the last `acme = true` site is gone).
pub fn forget() {
    super::retain(&[]);
    super::share_tokens(None);
    super::publish(Vec::new());
}

impl Managed {
    fn new(
        names: Vec<String>,
        stored: Option<Stored>,
        placeholder: bool,
    ) -> Result<Managed, String> {
        let mut m = Managed {
            status: Status {
                names: names.clone(),
                ..Status::default()
            },
            names,
            stored: None,
            renew_at: 0,
            ari_at: 0,
        };
        match stored {
            Some(s) if m.usable(&s) => m.serve(s),
            Some(s) if s.not_after > now() => {
                // Names were added: the stored certificate keeps serving those it covers
                // while one for them all is ordered.
                let (covered, uncovered): (Vec<String>, Vec<String>) =
                    m.names.iter().cloned().partition(|n| s.names.contains(n));
                super::install(&covered, &s.key);
                if placeholder {
                    super::install(&uncovered, &self_signed(&uncovered, None)?);
                    m.status.placeholder = true;
                }
                m.status.not_after = s.not_after;
                m.stored = Some(s);
            }
            _ if placeholder => {
                super::install(&m.names, &self_signed(&m.names, None)?);
                m.status.placeholder = true;
            }
            _ => {}
        }
        Ok(m)
    }

    /// A stored certificate covers every name and has not expired.
    fn usable(&self, s: &Stored) -> bool {
        s.not_after > now() && self.names.iter().all(|n| s.names.contains(n))
    }

    /// Serves `s` and schedules its renewal at two thirds of its lifetime, less up to a
    /// thirtieth of it (so that certificates issued together do not renew together).
    fn serve(&mut self, s: Stored) {
        super::install(&self.names, &s.key);
        let lifetime = (s.not_after - s.not_before).max(0);
        let jitter = fastrand::i64(0..=lifetime / 30);
        self.renew_at = s.not_before + lifetime * 2 / 3 - jitter;
        self.ari_at = 0;
        self.status.served = true;
        self.status.placeholder = false;
        self.status.not_after = s.not_after;
        self.status.renew_at = self.renew_at;
        self.stored = Some(s);
    }

    fn due(&self, t: i64) -> bool {
        t >= self.renew_at && t >= self.status.retry_at
    }

    fn next_wake(&self) -> i64 {
        let renew = self.renew_at.max(self.status.retry_at);
        if self.ari_at > 0 {
            renew.min(self.ari_at)
        } else {
            renew
        }
    }

    fn failed(&mut self, reason: String) {
        self.status.failures += 1;
        self.status.failing += 1;
        let wait = BACKOFF[(self.status.failing as usize - 1).min(BACKOFF.len() - 1)];
        let wait = wait + fastrand::i64(0..=wait / 10);
        let refused_nonce = reason.contains("urn:ietf:params:acme:error:badNonce");
        let wait = if refused_nonce && self.status.failing <= BAD_NONCE_FAILURES {
            BAD_NONCE_WAIT
        } else {
            wait
        };
        self.status.retry_at = now() + wait;
        tracing::error!(
            "ACME: no certificate for {} ({} failure(s) in a row): {reason}; next attempt in {wait} s",
            self.names.join(", "),
            self.status.failing
        );
        self.status.last_error = Some(reason);
    }
}

/// The thread's loop: attempt what is due, ask ARI when it is time, sleep until the next
/// thing to do or a reload.
async fn run(
    prepared: Prepared,
    mut updates: mpsc::UnboundedReceiver<Prepared>,
    mut stopped: oneshot::Receiver<()>,
) {
    let Prepared {
        mut settings,
        mut state,
        mut certs,
    } = prepared;
    let mut account: Option<Account> = None;
    tokio::spawn(super::scan_shared_tokens());
    loop {
        for m in &mut certs {
            let work = async {
                if m.due(now()) {
                    let work = attempt(&settings, &state, &mut account, m);
                    if tokio::time::timeout(WORK_TIMEOUT, work).await.is_err() {
                        m.failed(format!(
                            "no answer from the CA within {} s",
                            WORK_TIMEOUT.as_secs()
                        ));
                    }
                } else if (m.ari_at != 0 && now() >= m.ari_at)
                    || (m.ari_at == 0 && m.stored.is_some())
                {
                    let work = ask_ari(&settings, &state, &mut account, m);
                    if tokio::time::timeout(WORK_TIMEOUT, work).await.is_err() {
                        m.ari_at = now() + 3600;
                    }
                }
            };
            tokio::select! {
                () = work => {}
                _ = &mut stopped => return,
            }
        }
        super::publish(certs.iter().map(|m| m.status.clone()).collect());
        let wake = certs
            .iter()
            .map(Managed::next_wake)
            .min()
            .unwrap_or(i64::MAX);
        let wait = Duration::from_secs(wake.saturating_sub(now()).clamp(0, 86_400) as u64);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = super::shared::CHANGED.notified() => take_stored(&state, &mut certs),
            update = updates.recv() => match update {
                Some(p) => {
                    if p.settings.directory != settings.directory || p.settings.ca_root != settings.ca_root {
                        account = None;
                    }
                    certs = carry_over(certs, p.certs);
                    settings = p.settings;
                    state = p.state;
                }
                None => return,
            },
            _ = &mut stopped => return,
        }
    }
}

/// Serves what another instance of the fleet stored for these certificates.
fn take_stored(state: &StateDir, certs: &mut [Managed]) {
    for m in certs.iter_mut() {
        if let Ok(Some(s)) = state.read_cert(&m.names[0]) {
            if m.usable(&s) && !same(m.stored.as_ref(), &s) {
                tracing::info!("ACME: {} taken from the fleet's store", m.names.join(", "));
                m.serve(s);
            }
        }
    }
    super::publish(certs.iter().map(|m| m.status.clone()).collect());
}

/// A reload's certificates, keeping the counts and backoff of those with the same names.
fn carry_over(mut old: Vec<Managed>, mut new: Vec<Managed>) -> Vec<Managed> {
    for n in &mut new {
        if let Some(i) = old.iter().position(|o| o.names == n.names) {
            let expiry = |s: &Option<Stored>| s.as_ref().map_or(0, |s| s.not_after);
            if expiry(&old[i].stored) > expiry(&n.stored) {
                // The thread renewed after the reload read the state: keep that one.
                if let Some(s) = old[i].stored.clone().filter(|s| n.usable(s)) {
                    n.serve(s);
                }
            }
            let o = &old[i];
            let s = &o.status;
            n.status.orders = s.orders;
            n.status.issued = s.issued;
            n.status.replacements_refused = s.replacements_refused;
            n.status.failures = s.failures;
            n.status.failing = s.failing;
            n.status.retry_at = s.retry_at;
            n.status.last_error.clone_from(&s.last_error);
            let same_cert = match (&o.stored, &n.stored) {
                (Some(a), Some(b)) => a.key.cert == b.key.cert,
                _ => false,
            };
            if same_cert {
                n.ari_at = o.ari_at;
                n.renew_at = o.renew_at;
                n.status.renew_at = o.renew_at;
            }
        }
    }
    old.clear();
    new
}

/// One attempt at a certificate, under its lock: one stored meanwhile (by another instance)
/// is taken as it is, else one is ordered.
async fn attempt(
    settings: &AcmeSettings,
    state: &StateDir,
    account: &mut Option<Account>,
    m: &mut Managed,
) {
    let lock = match state.try_lock(&m.names[0]) {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            // Another instance is ordering these names: look again shortly.
            m.status.retry_at = now() + LOCK_RETRY;
            return;
        }
        Err(e) => return m.failed(e),
    };
    match state.read_cert(&m.names[0]) {
        Ok(Some(s)) if m.usable(&s) && !same(m.stored.as_ref(), &s) => {
            tracing::info!(
                "ACME: {} taken from the state directory",
                m.names.join(", ")
            );
            m.serve(s);
            if now() < m.renew_at {
                m.status.failing = 0;
                return;
            }
        }
        Ok(_) => {}
        Err(e) => return m.failed(e),
    }
    let result = order(settings, state, account, m).await;
    drop(lock);
    match result {
        Ok(s) => {
            tracing::info!(
                "ACME: certificate for {} obtained, valid until {}",
                m.names.join(", "),
                s.not_after
            );
            m.status.issued += 1;
            m.status.failing = 0;
            m.status.retry_at = 0;
            m.status.last_error = None;
            m.serve(s);
        }
        Err(e) => m.failed(e),
    }
}

fn same(a: Option<&Stored>, b: &Stored) -> bool {
    a.is_some_and(|a| a.key.cert == b.key.cert)
}

/// The account: the stored one, or a new one saved (under a lock shared by the instances).
async fn account_for(settings: &AcmeSettings, state: &StateDir) -> Result<Account, String> {
    let builder = || match &settings.ca_root {
        Some(root) => Account::builder_with_root(root),
        None => Account::builder(),
    };
    let acme = |e: instant_acme::Error| format!("{}: {e}", settings.directory);
    let lock = loop {
        if let Some(lock) = state.try_lock("account")? {
            break lock;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if let Some(credentials) = state.read_account()? {
        return builder()
            .map_err(acme)?
            .from_credentials(credentials)
            .await
            .map_err(acme);
    }
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = builder()
        .map_err(acme)?
        .create(&new, settings.directory.clone(), None)
        .await
        .map_err(acme)?;
    state.write_account(&credentials)?;
    drop(lock);
    tracing::info!("ACME: account created at {}", settings.directory);
    Ok(account)
}

/// Orders a certificate for `m`'s names, answers its challenges, saves and returns it.
async fn order(
    settings: &AcmeSettings,
    state: &StateDir,
    account: &mut Option<Account>,
    m: &mut Managed,
) -> Result<Stored, String> {
    if account.is_none() {
        *account = Some(account_for(settings, state).await?);
    }
    let acct = account.as_ref().ok_or("no account")?;
    let acme = |e: instant_acme::Error| e.to_string();
    let ids: Vec<Identifier> = m.names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    // An ARI renewal names the certificate it replaces (exempt from the CA's rate limits).
    let replaces = m
        .stored
        .as_ref()
        .and_then(|s| s.ari_id.as_deref())
        .and_then(certificate_id);
    m.status.orders += 1;
    let mut placed = match replaces {
        None => acct.new_order(&NewOrder::new(&ids)).await.map_err(acme)?,
        Some(id) => match acct.new_order(&NewOrder::new(&ids).replaces(id)).await {
            Ok(placed) => placed,
            // A CA that refuses the replacement (it has no record of the certificate, or
            // thinks it another account's or replaced already) gets the plain order at once:
            // the renewal is not put off over it.
            Err(instant_acme::Error::Api(problem)) => {
                tracing::warn!(
                    "ACME: the CA refused a renewal order for {} naming the certificate it replaces ({problem}); ordering again without naming it",
                    m.names.join(", ")
                );
                m.status.replacements_refused += 1;
                acct.new_order(&NewOrder::new(&ids)).await.map_err(acme)?
            }
            Err(e) => return Err(acme(e)),
        },
    };
    let mut answers = Answers::default();
    let mut authorizations = placed.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(acme)?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("authorization {other:?}")),
        }
        let name = authz.identifier().to_string();
        let kind = match settings.challenge {
            Challenge::Http01 => ChallengeType::Http01,
            Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        };
        let mut challenge = authz
            .challenge(kind.clone())
            .ok_or_else(|| format!("the CA offers no {kind:?} challenge for {name}"))?;
        let key_authorization = challenge.key_authorization();
        match settings.challenge {
            Challenge::Http01 => {
                answers.http(state, &challenge.token, key_authorization.as_str());
                // Other instances sharing the state directory (the CA may reach any of
                // them) read the answer within one scan.
                tokio::time::sleep(super::SHARED_TOKEN_SCAN * 2).await;
            }
            Challenge::TlsAlpn01 => {
                let key = self_signed(
                    std::slice::from_ref(&name),
                    Some(key_authorization.digest().as_ref()),
                )?;
                answers.alpn(&name, key);
            }
        }
        challenge.set_ready().await.map_err(acme)?;
    }
    let policy = RetryPolicy::new().timeout(ORDER_TIMEOUT);
    let status = placed
        .poll_ready(&policy)
        .await
        .map_err(|e| format!("the challenge failed: {e}"))?;
    if status != OrderStatus::Ready {
        return Err(order_failure(&mut placed, status).await);
    }
    let key_pem = placed.finalize().await.map_err(acme)?;
    let chain_pem = placed.poll_certificate(&policy).await.map_err(acme)?;
    drop(answers);
    let stored = super::state::from_pem(&chain_pem, &key_pem)?;
    state.write_cert(&m.names[0], &chain_pem, &key_pem)?;
    Ok(stored)
}

/// Why an order did not become ready: each failed challenge's problem.
async fn order_failure(placed: &mut instant_acme::Order, status: OrderStatus) -> String {
    let mut reasons = Vec::new();
    let mut authorizations = placed.authorizations();
    while let Some(Ok(authz)) = authorizations.next().await {
        let name = authz.identifier().to_string();
        for c in &authz.challenges {
            if let Some(problem) = &c.error {
                reasons.push(format!("{name}: {problem}"));
            }
        }
    }
    if reasons.is_empty() {
        format!("the order is {status:?}")
    } else {
        format!("the challenge failed: {}", reasons.join("; "))
    }
}

/// Asks the CA's ARI when to renew; a time in the window is picked at random. Without ARI
/// (or on an error) the two-thirds schedule stands.
async fn ask_ari(
    settings: &AcmeSettings,
    state: &StateDir,
    account: &mut Option<Account>,
    m: &mut Managed,
) {
    // Asked again within a day, or at the time the CA says.
    m.ari_at = now() + 86_400;
    let Some(id) = m.stored.as_ref().and_then(|s| s.ari_id.clone()) else {
        m.ari_at = i64::MAX;
        return;
    };
    if account.is_none() && state.read_account().ok().flatten().is_some() {
        *account = account_for(settings, state).await.ok();
    }
    let (Some(acct), Some(cid)) = (account.as_ref(), certificate_id(&id)) else {
        return;
    };
    match acct.renewal_info(&cid).await {
        Ok((info, retry_after)) => {
            let w = info.suggested_window;
            let (start, end) = (w.start.unix_timestamp(), w.end.unix_timestamp());
            let at = if end > start {
                fastrand::i64(start..=end)
            } else {
                start
            };
            // Not before half the lifetime unless the CA says now (a window already over: a
            // revoked certificate), and never in the last tenth: an order takes time.
            let (earliest, latest) = m.stored.as_ref().map_or((at, at), |s| {
                let lifetime = s.not_after - s.not_before;
                (
                    s.not_before + lifetime / 2,
                    s.not_before + lifetime * 9 / 10,
                )
            });
            let at = if end <= now() { at } else { at.max(earliest) };
            let at = at.min(latest);
            m.renew_at = at;
            m.status.renew_at = at;
            m.ari_at = now() + (retry_after.as_secs() as i64).clamp(60, 86_400);
        }
        Err(instant_acme::Error::Unsupported(_)) => m.ari_at = i64::MAX,
        Err(e) => tracing::debug!("ACME: renewal information for {}: {e}", m.names[0]),
    }
}

/// An ARI certificate id from its text (`AKI.SERIAL`, both base64url).
fn certificate_id(text: &str) -> Option<CertificateIdentifier<'_>> {
    let (aki, serial) = text.split_once('.')?;
    Some(CertificateIdentifier {
        authority_key_identifier: Cow::Borrowed(aki),
        serial: Cow::Borrowed(serial),
    })
}

/// A self-signed P-256 certificate for `names`: a placeholder, or with the acmeIdentifier
/// extension holding a key authorization's digest, a TLS-ALPN-01 answer (RFC 8737).
fn self_signed(names: &[String], acme_digest: Option<&[u8]>) -> Result<Arc<CertifiedKey>, String> {
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    if let Some(digest) = acme_digest {
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    }
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    // Built directly: rustls's key check parses the certificate with webpki, which refuses
    // the critical acmeIdentifier extension a TLS-ALPN-01 answer must carry.
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing =
        rustls::crypto::aws_lc_rs::sign::any_supported_type(&der).map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signing,
    )))
}

/// The challenge answers of one order, published while it lasts and withdrawn when dropped.
#[derive(Default)]
struct Answers {
    tokens: Vec<String>,
    names: Vec<String>,
    shared: Option<std::path::PathBuf>,
    /// The answers' keys in a fleet's shared store.
    keys: Vec<String>,
}

impl Answers {
    /// Publishes an HTTP-01 answer, also in the state directory and the fleet's store for the
    /// other instances.
    fn http(&mut self, state: &StateDir, token: &str, key_authorization: &str) {
        super::set_http01(token, Some(key_authorization.to_string()));
        if !super::well_formed_token(token) {
            // Answered from memory only: never a file name made of what a CA sent.
            return;
        }
        let shared = state.tokens_dir();
        let _ = super::state::write_atomically(&shared.join(token), key_authorization.as_bytes());
        let key = state.token_key(token);
        if let Err(e) = super::shared::publish_for_a_while(&key, key_authorization.as_bytes()) {
            tracing::warn!("ACME: the HTTP-01 answer did not reach the fleet's store: {e}");
        }
        self.keys.push(key);
        self.tokens.push(token.to_string());
        self.shared = Some(shared);
    }

    fn alpn(&mut self, name: &str, key: Arc<CertifiedKey>) {
        super::set_alpn(name, Some(key));
        self.names.push(name.to_string());
    }
}

impl Drop for Answers {
    fn drop(&mut self) {
        for t in &self.tokens {
            super::set_http01(t, None);
            if let Some(dir) = &self.shared {
                let _ = std::fs::remove_file(dir.join(t));
            }
        }
        for n in &self.names {
            super::set_alpn(n, None);
        }
        for k in &self.keys {
            super::shared::withdraw(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_alpn_answers_carry_the_digest_in_a_critical_extension() {
        let digest = [7u8; 32];
        let key = self_signed(&["a.test".into()], Some(&digest)).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(key.cert[0].as_ref()).unwrap();
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier");
        assert!(ext.critical);
        // An OCTET STRING of 32 bytes.
        assert_eq!(&ext.value[..2], &[0x04, 0x20]);
        assert_eq!(&ext.value[2..], &digest);
    }

    #[test]
    fn failures_back_off_and_renewal_falls_in_the_last_third() {
        let names = vec!["b.test".to_string()];
        let mut m = Managed::new(names, None, false).unwrap();
        assert!(m.due(now()));
        m.failed("down".into());
        let first = m.status.retry_at - now();
        assert!((60..=67).contains(&first), "{first}");
        m.failed("down".into());
        assert!(m.status.retry_at - now() >= 600);
        assert!(!m.due(now()));
        let key = self_signed(&["b.test".into()], None).unwrap();
        let leaf = key.cert[0].clone();
        let mut s = super::super::state::describe(key, &leaf).unwrap();
        s.not_before = now();
        s.not_after = now() + 90 * 86_400;
        m.serve(s);
        let third = 30 * 86_400;
        assert!(m.renew_at <= now() + 2 * third && m.renew_at >= now() + 2 * third - third / 10);
    }

    #[test]
    fn a_refused_nonce_is_tried_again_soon_three_times_then_backs_off() {
        let names = vec!["c.test".to_string()];
        let mut m = Managed::new(names, None, false).unwrap();
        let refused = "https://ca/dir: API error: JWS has an invalid anti-replay nonce: x \
                       (urn:ietf:params:acme:error:badNonce)";
        for _ in 0..BAD_NONCE_FAILURES {
            m.failed(refused.into());
            let wait = m.status.retry_at - now();
            assert!((0..=BAD_NONCE_WAIT).contains(&wait), "{wait}");
        }
        m.failed(refused.into());
        assert!(
            m.status.retry_at - now() >= BACKOFF[3],
            "a CA refusing every nonce was hammered"
        );
        assert_eq!(m.status.failing, BAD_NONCE_FAILURES + 1);
    }
}
