//! The test CA and certificates every TLS server test uses.

use crate::common::*;
use std::process::Command;

/// Certificates made for one test with the openssl CLI: a CA, a server
/// certificate for 127.0.0.1 (also good as a client's: a Redis replica
/// connects with it), a client certificate whose CN is `app` (etcd maps it
/// to the user `app`), and a second CA with a client certificate of its
/// own (`rogue`) that the servers do not trust. One for every server.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub fn make() -> Option<Pki> {
        if !needs("openssl", "Debian: apt-get install openssl") {
            return None;
        }
        let pki = Pki { dir: temp_dir() };
        let d = pki.dir.path();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .expect("ext");
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let (subject, k, pem) = (
                format!("/CN=lockrun test {ca}"),
                format!("{ca}.key"),
                format!("{ca}.pem"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(key);
            args.extend(["-keyout", &k, "-out", &pem, "-days", "2", "-subj", &subject]);
            openssl(&args);
        }
        for (name, ca, cn, ext) in [
            ("server", "ca", "lockrun test server", "server.ext"),
            ("client", "ca", "app", "client.ext"),
            ("rogue", "other-ca", "app", "client.ext"),
        ] {
            let (k, csr, pem, subject) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
                format!("/CN={cn}"),
            );
            let mut args = vec!["req"];
            args.extend(key);
            args.extend(["-keyout", &k, "-out", &csr, "-subj", &subject]);
            openssl(&args);
            let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                ext,
            ]);
        }
        Some(pki)
    }

    pub fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}
