//! Standard base64 (RFC 4648, with padding), the encoding etcd's JSON
//! gateway uses for keys and values. Thirty lines here instead of a crate:
//! lockrun encodes a lock name and a record, nothing more.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `None` for anything that is not base64: what etcd sends back is data
/// that other clients wrote, and is treated as untrusted.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits & 0xff) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_length() {
        let data: Vec<u8> = (0..=255).collect();
        for len in 0..40 {
            let enc = encode(&data[..len]);
            assert_eq!(enc.len() % 4, 0);
            assert_eq!(decode(&enc).as_deref(), Some(&data[..len]));
        }
    }

    #[test]
    fn matches_known_vectors() {
        assert_eq!(encode(b"foo"), "Zm9v");
        assert_eq!(encode(b"bar/"), "YmFyLw==");
        assert_eq!(encode(b"fo"), "Zm8=");
        assert_eq!(decode("YmFyMA==").as_deref(), Some(&b"bar0"[..]));
        assert_eq!(decode("not base64!"), None);
    }
}
