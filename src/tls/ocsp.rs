//! OCSP stapling's codec (RFC 6960), socket-free: which certificates name a responder, the
//! request for one, and the checks a response must pass before it is stapled: a successful
//! basic response for exactly this certificate, status good, current (`thisUpdate` passed,
//! `nextUpdate` ahead), signed by the issuer or by a responder the issuer delegated to
//! (`id-kp-OCSPSigning`). Anything else is refused with the reason, and nothing is stapled.

use der::asn1::{Null, ObjectIdentifier, OctetString};
use der::{Decode, Encode};
use rustls::pki_types::CertificateDer;
use x509_ocsp::{CertId, CertStatus, OcspRequest, OcspResponse, OcspResponseStatus};

const OCSP_ACCESS: &str = "1.3.6.1.5.5.7.48.1";
const OCSP_BASIC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.1");
const SHA1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.14.3.2.26");
const EKU: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37");
const OCSP_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.9");
/// Clock skew allowed on `thisUpdate`.
const SKEW: i64 = 300;

/// A certificate to staple: its responder and the CertID that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The responder's URL (from the certificate's Authority Information Access).
    pub url: String,
    cert_id: CertId,
    /// The issuer's SubjectPublicKeyInfo (DER), which signs responses or delegates.
    issuer_spki: Vec<u8>,
    issuer_subject: Vec<u8>,
}

/// A response that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staple {
    /// The DER of the whole OCSPResponse, as stapled.
    pub der: Vec<u8>,
    /// Its `thisUpdate` and `nextUpdate`, in seconds since the epoch.
    pub this_update: i64,
    /// See `this_update`.
    pub next_update: i64,
}

impl Staple {
    /// When to fetch a fresh one: halfway to `nextUpdate`, and at least an hour before it
    /// when the window allows.
    pub fn refresh_at(&self) -> i64 {
        let half = self.this_update + (self.next_update - self.this_update) / 2;
        half.min(self.next_update - 3600).max(self.this_update)
    }

    /// When it must stop being stapled: a little before `nextUpdate` (a tenth of its life,
    /// at most a minute), so that no client ever receives it stale.
    pub fn withdraw_at(&self) -> i64 {
        let life = (self.next_update - self.this_update).max(0);
        self.next_update - (life / 10).min(60)
    }
}

/// The stapling target of a chain (leaf first, its issuer second): `None` when the leaf names
/// no OCSP responder or the chain has no issuer; an error when the certificates do not read.
pub fn target(chain: &[CertificateDer<'_>]) -> Option<Result<Target, String>> {
    let (_, leaf) = x509_parser::parse_x509_certificate(chain.first()?.as_ref()).ok()?;
    let url = responder_url(&leaf)?;
    let issuer_der = chain.get(1)?;
    Some(target_of(&leaf, issuer_der, url))
}

/// The target of `leaf` as issued by `issuer`, asking `url` (for the fuzz target).
pub fn target_with(
    leaf: &CertificateDer<'_>,
    issuer: &CertificateDer<'_>,
    url: &str,
) -> Result<Target, String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("the certificate does not read: {e}"))?;
    target_of(&parsed, issuer, url.to_string())
}

fn target_of(
    leaf: &x509_parser::certificate::X509Certificate<'_>,
    issuer_der: &CertificateDer<'_>,
    url: String,
) -> Result<Target, String> {
    let (_, issuer) = x509_parser::parse_x509_certificate(issuer_der.as_ref())
        .map_err(|e| format!("the issuer certificate does not read: {e}"))?;
    if leaf.issuer().as_raw() != issuer.subject().as_raw() {
        return Err("the certificate after the leaf in the file is not its issuer".into());
    }
    let sha1 = |b: &[u8]| {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, b);
        OctetString::new(d.as_ref()).map_err(|e| e.to_string())
    };
    let serial = x509_cert::serial_number::SerialNumber::new(leaf.raw_serial())
        .map_err(|e| format!("serial: {e}"))?;
    let cert_id = CertId {
        hash_algorithm: spki::AlgorithmIdentifierOwned {
            oid: SHA1,
            parameters: Some(Null.into()),
        },
        issuer_name_hash: sha1(issuer.subject().as_raw())?,
        issuer_key_hash: sha1(&issuer.public_key().subject_public_key.data)?,
        serial_number: serial,
    };
    Ok(Target {
        url,
        cert_id,
        issuer_spki: issuer.public_key().raw.to_vec(),
        issuer_subject: issuer.subject().as_raw().to_vec(),
    })
}

/// The leaf's OCSP responder URL (`http://` only: an OCSP fetch over TLS would need OCSP).
fn responder_url(cert: &x509_parser::certificate::X509Certificate<'_>) -> Option<String> {
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityInfoAccess(aia) => aia.accessdescs.iter().find_map(|d| {
                let ocsp = d.access_method.to_id_string() == OCSP_ACCESS;
                match &d.access_location {
                    GeneralName::URI(u) if ocsp && u.starts_with("http://") => Some(u.to_string()),
                    _ => None,
                }
            }),
            _ => None,
        })
}

/// The DER of an OCSPRequest for `target` (one certificate, unsigned, no nonce: responders
/// answer those from their cache, as stapling wants).
pub fn request(target: &Target) -> Vec<u8> {
    let request = OcspRequest {
        tbs_request: x509_ocsp::TbsRequest {
            version: x509_ocsp::Version::V1,
            requestor_name: None,
            request_list: vec![x509_ocsp::Request {
                req_cert: target.cert_id.clone(),
                single_request_extensions: None,
            }],
            request_extensions: None,
        },
        optional_signature: None,
    };
    request.to_der().unwrap_or_default()
}

/// Checks a responder's answer for `target` at `now` (seconds since the epoch).
pub fn check(target: &Target, der: &[u8], now: i64) -> Result<Staple, String> {
    let response = OcspResponse::from_der(der).map_err(|e| format!("not an OCSP response: {e}"))?;
    if response.response_status != OcspResponseStatus::Successful {
        return Err(format!(
            "the responder answered {:?}",
            response.response_status
        ));
    }
    let bytes = response
        .response_bytes
        .ok_or("a successful response without a body")?;
    if bytes.response_type != OCSP_BASIC {
        return Err(format!(
            "response type {} is not basic",
            bytes.response_type
        ));
    }
    let basic = x509_ocsp::BasicOcspResponse::from_der(bytes.response.as_bytes())
        .map_err(|e| format!("the basic response does not read: {e}"))?;
    let single = basic
        .tbs_response_data
        .responses
        .iter()
        .find(|r| same_cert(&r.cert_id, &target.cert_id))
        .ok_or("no answer for this certificate in the response")?;
    match single.cert_status {
        CertStatus::Good(_) => {}
        CertStatus::Revoked(_) => {
            return Err("the responder says the certificate is revoked".into())
        }
        CertStatus::Unknown(_) => return Err("the responder does not know the certificate".into()),
    }
    let seconds = |t: &x509_ocsp::OcspGeneralizedTime| t.0.to_unix_duration().as_secs() as i64;
    let this_update = seconds(&single.this_update);
    let next_update = single
        .next_update
        .as_ref()
        .map(seconds)
        .ok_or("no nextUpdate: the response's life is unknown")?;
    if this_update > now + SKEW {
        return Err("thisUpdate is in the future".into());
    }
    if next_update <= now {
        return Err("the response is stale (nextUpdate passed)".into());
    }
    let tbs = basic
        .tbs_response_data
        .to_der()
        .map_err(|e| e.to_string())?;
    let signer = signer_spki(target, basic.certs.as_deref().unwrap_or_default(), now)?;
    verify(
        &signer,
        &basic.signature_algorithm.oid,
        &tbs,
        basic.signature.raw_bytes(),
    )?;
    Ok(Staple {
        der: der.to_vec(),
        this_update,
        next_update,
    })
}

/// CertIDs match (SHA-1 is what we asked in; a responder answering in another hash is not
/// matched).
fn same_cert(a: &CertId, b: &CertId) -> bool {
    a.hash_algorithm.oid == b.hash_algorithm.oid
        && a.issuer_name_hash == b.issuer_name_hash
        && a.issuer_key_hash == b.issuer_key_hash
        && a.serial_number == b.serial_number
}

/// The key that must have signed the response: the issuer's, or a delegated responder's
/// (a certificate in the response, issued by the issuer for OCSP signing).
fn signer_spki(
    target: &Target,
    certs: &[x509_cert::Certificate],
    now: i64,
) -> Result<Vec<u8>, String> {
    let Some(delegate) = certs.first() else {
        return Ok(target.issuer_spki.clone());
    };
    let tbs = &delegate.tbs_certificate;
    let spki = tbs
        .subject_public_key_info
        .to_der()
        .map_err(|e| e.to_string())?;
    if spki == target.issuer_spki {
        return Ok(spki);
    }
    let issuer = tbs.issuer.to_der().map_err(|e| e.to_string())?;
    if issuer != target.issuer_subject {
        return Err("the response is signed by a certificate the issuer did not issue".into());
    }
    let signed = tbs.to_der().map_err(|e| e.to_string())?;
    verify(
        &target.issuer_spki,
        &delegate.signature_algorithm.oid,
        &signed,
        delegate.signature.raw_bytes(),
    )
    .map_err(|e| format!("the delegated responder's certificate: {e}"))?;
    let for_ocsp = tbs.extensions.iter().flatten().any(|ext| {
        ext.extn_id == EKU
            && x509_cert::ext::pkix::ExtendedKeyUsage::from_der(ext.extn_value.as_bytes())
                .is_ok_and(|eku| eku.0.contains(&OCSP_SIGNING))
    });
    if !for_ocsp {
        return Err("the delegated responder's certificate is not for OCSP signing".into());
    }
    let at = |t: &x509_cert::time::Time| t.to_unix_duration().as_secs() as i64;
    if now < at(&tbs.validity.not_before) || now > at(&tbs.validity.not_after) {
        return Err("the delegated responder's certificate is not valid now".into());
    }
    Ok(spki)
}

/// Verifies `signature` over `msg` by the key in `spki` (DER) with the algorithm `alg`.
fn verify(spki: &[u8], alg: &ObjectIdentifier, msg: &[u8], signature: &[u8]) -> Result<(), String> {
    use aws_lc_rs::signature as sig;
    let info = spki::SubjectPublicKeyInfoRef::from_der(spki).map_err(|e| e.to_string())?;
    let key = info.subject_public_key.raw_bytes();
    let curve = info
        .algorithm
        .parameters
        .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
        .map(|o| o.to_string());
    let p384 = curve.as_deref() == Some("1.3.132.0.34");
    let algorithm: &dyn sig::VerificationAlgorithm = match (alg.to_string().as_str(), p384) {
        ("1.2.840.10045.4.3.2", false) => &sig::ECDSA_P256_SHA256_ASN1,
        ("1.2.840.10045.4.3.2", true) => &sig::ECDSA_P384_SHA256_ASN1,
        ("1.2.840.10045.4.3.3", false) => &sig::ECDSA_P256_SHA384_ASN1,
        ("1.2.840.10045.4.3.3", true) => &sig::ECDSA_P384_SHA384_ASN1,
        ("1.2.840.113549.1.1.11", _) => &sig::RSA_PKCS1_2048_8192_SHA256,
        ("1.2.840.113549.1.1.12", _) => &sig::RSA_PKCS1_2048_8192_SHA384,
        ("1.2.840.113549.1.1.13", _) => &sig::RSA_PKCS1_2048_8192_SHA512,
        ("1.3.101.112", _) => &sig::ED25519,
        (other, _) => return Err(format!("signature algorithm {other} is not accepted")),
    };
    sig::UnparsedPublicKey::new(algorithm, key)
        .verify(msg, signature)
        .map_err(|_| "the signature does not verify".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_without_a_responder_or_an_issuer_are_not_stapled() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert!(target(&[cert.der().clone()]).is_none());
        assert!(target(&[]).is_none());
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(cert.der()).unwrap();
        let t = target_of(&parsed, cert.der(), "http://127.0.0.1/".into()).unwrap();
        assert!(!request(&t).is_empty());
        assert!(check(&t, b"junk", 0)
            .unwrap_err()
            .contains("not an OCSP response"));
        // tryLater: 30 03 0a 01 03
        assert!(check(&t, &[0x30, 0x03, 0x0a, 0x01, 0x03], 0)
            .unwrap_err()
            .contains("TryLater"));
    }

    #[test]
    fn a_staple_is_refreshed_halfway_and_an_hour_before_it_expires() {
        let s = |this, next| Staple {
            der: Vec::new(),
            this_update: this,
            next_update: next,
        };
        assert_eq!(s(0, 7 * 86_400).refresh_at(), 7 * 86_400 / 2);
        assert_eq!(s(0, 4000).refresh_at(), 400);
        assert_eq!(s(0, 600).refresh_at(), 0);
    }
}
