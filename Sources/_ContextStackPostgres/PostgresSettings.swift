import CLibpq
import Foundation

/// Where a PostgreSQL server is and how long to wait for it: a `postgres://` URL plus the
/// settings ContextStack adds to every connection.
///
/// The URL is what libpq accepts (`postgres://user:password@host:port/database?sslmode=…`,
/// libpq's "Connection URIs"); its parameters win over the settings here, so an operator can
/// change a timeout in the URL alone.
package struct PostgresSettings: Sendable {
    /// The server, as given. Never printed: `redactedURL` is what messages show.
    package let url: URL
    /// Seconds libpq waits for a connection before failing (libpq's `connect_timeout`).
    package var connectTimeout: Int
    /// Milliseconds the server lets one statement run before cancelling it (PostgreSQL's
    /// `statement_timeout`, sent as libpq's `options`); 0 for no limit. A cancelled statement
    /// fails its commit or read with `PostgresError` code 57014 (`queryCanceled`).
    package var statementTimeout: Int
    /// The name the server shows for these connections in `pg_stat_activity`.
    package var applicationName: String
    /// The oldest server a store opens on, as PostgreSQL numbers versions: 13, whose
    /// `pg_current_xact_id()` and `pg_current_snapshot()` history needs (Docs/Postgres.md).
    /// (Higher in a test, to see an older server refused.)
    package var oldestServerVersion = 130_000

    package init(url: URL, connectTimeout: Int = 10, statementTimeout: Int = 60_000, applicationName: String = "ContextStack") {
        self.url = url
        self.connectTimeout = connectTimeout
        self.statementTimeout = statementTimeout
        self.applicationName = applicationName
    }

    /// libpq's keywords that make a connection whose server stopped answering fail within
    /// about 30 seconds: probes after 15 s of silence, 5 s apart, 3 unanswered; data unacknowledged
    /// for 30 s.
    /// (`tcp_user_timeout` only from libpq 12 on, which older ones refuse as an unknown
    /// option.)
    static let deadServerDetection = [("keepalives", "1"), ("keepalives_idle", "15"), ("keepalives_interval", "5"),
                                      ("keepalives_count", "3")] + (PQlibVersion() >= 120_000 ? [("tcp_user_timeout", "30000")] : [])

    /// Milliseconds a connection waits for an answer beyond the statement timeout before it
    /// takes the server as hung (`PostgresConnection.answerLimit`): the server cancels a
    /// statement at its timeout and answers at once, so only a process that stopped is silent
    /// this long. Long enough for a `COMMIT`'s wait for the disk on a busy server. (Shorter in
    /// tests.)
    package var hungServerMargin = 30_000

    /// Whether `options` (what `keywordsAndValues` sends) sets a statement timeout besides
    /// ContextStack's own, which then wins.
    func mayOverrideStatementTimeout(options: String) -> Bool {
        // (Setting names ignore case, and `--statement-timeout=…` is the same as `-c …`.)
        options.lowercased().replacingOccurrences(of: "-", with: "_").components(separatedBy: "statement_timeout").count > 2
    }

    /// The URL without its password, and of its parameters only those that name the server
    /// (`host`, `hostaddr`, `port`, `user`, `dbname`): `postgres://app@db:5432/app`, or
    /// `postgres:///app?host=db1,db2&port=5432,5433&user=app` where the URL gives them there.
    /// What error messages and traces show of the server.
    package var redactedURL: String {
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return "postgres://(unparsable URL)" }
        parts.password = nil
        let naming = parts.percentEncodedQueryItems?.filter { Self.serverParameters.contains($0.name) } ?? []
        parts.percentEncodedQueryItems = naming.isEmpty ? nil : naming
        parts.fragment = nil
        return parts.string ?? "postgres://(unparsable URL)"
    }

    /// The URL parameters that say which server and database: kept in `redactedURL`.
    private static let serverParameters: Set<String> = ["host", "hostaddr", "port", "user", "dbname"]

    /// `message` (libpq's) with the URL's password — of its user part or a `password`
    /// parameter — as written and as decoded, replaced by
    /// `***`: libpq quotes a value of the URL it cannot decode (`forbidden value %00 in
    /// percent-encoded value: "…"`), and the password can be that value.
    package func redacting(_ message: String) -> String {
        guard let parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return message }
        // The password of the user part, or of a `?password=` parameter.
        let parameter = parts.queryItems?.filter { $0.name == "password" }.compactMap(\.value) ?? []
        let encoded = parts.percentEncodedQueryItems?.filter { $0.name == "password" }.compactMap(\.value) ?? []
        let secrets = ([parts.percentEncodedPassword, parts.password].compactMap { $0 } + parameter + encoded).filter { !$0.isEmpty }
        return secrets.sorted { $0.count > $1.count }.reduce(message) { $0.replacingOccurrences(of: $1, with: "***") }
    }

    /// Checks what libpq would otherwise reject with a less helpful message.
    /// - Throws: `PostgresError` with code `.cannotConnect` naming what is wrong.
    package func validate() throws(PostgresError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "postgres" || scheme == "postgresql" else {
            throw PostgresError(code: .cannotConnect, message: "\(redactedURL) is not a PostgreSQL URL: use postgres://user:password@host:port/database")
        }
    }

    /// libpq's connection keywords and values, in the order it processes them: ContextStack's
    /// defaults first, then the URL (`dbname` expands it), whose own parameters override them.
    /// `client_encoding` comes after the URL, so that no URL changes it: every text is read
    /// and written as UTF-8. `options` comes last, ContextStack's server settings followed by
    /// the environment's `PGOPTIONS` and the URL's own, so that a URL naming a `search_path`
    /// keeps the statement timeout and one naming a `statement_timeout` wins (the server
    /// applies `-c` settings in order).
    ///
    /// libpq reads its environment variables (`PGHOST`, `PGAPPNAME`, …) only for keywords it
    /// is not given, so a default is left out where the environment sets its own:
    /// `PGCONNECT_TIMEOUT` and `PGAPPNAME` win over ContextStack's defaults, and the URL over
    /// both. (`PGCLIENTENCODING` does not: the encoding is always UTF-8.)
    var keywordsAndValues: [(String, String)] { keywordsAndValues(environment: ProcessInfo.processInfo.environment) }

    func keywordsAndValues(environment: [String: String]) -> [(String, String)] {
        let own = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems?.last { $0.name == "options" }?.value
        var pairs: [(String, String)] = []
        if environment["PGCONNECT_TIMEOUT"] == nil { pairs.append(("connect_timeout", String(connectTimeout))) }
        if environment["PGAPPNAME"] == nil { pairs.append(("application_name", applicationName)) }
        // A server that stops answering without closing the connection — a network dropped in
        // between, its machine gone — would leave a statement waiting for as long as the
        // kernel retries (about fifteen minutes on Linux), and with it the commits and reads
        // queued behind it. TCP keepalives find such a connection while it waits for an answer,
        // and the user timeout while what it sent goes unacknowledged: about 30 seconds.
        pairs += Self.deadServerDetection
        // Values come back as text, read in one form. Last, so that nothing overrides them (a
        // database's or a role's default, `PGOPTIONS`, the URL): with `extra_float_digits`
        // below 1, a double would come back rounded to 15 digits; with `bytea_output=escape`,
        // `Data`, UUIDs and the history's change lists would come back as their escaped text;
        // and the statements' quoted literals assume `standard_conforming_strings`. Each value
        // read wrongly would be saved so by the next commit.
        let options = ["-c statement_timeout=\(statementTimeout)", environment["PGOPTIONS"], own,
                       "-c extra_float_digits=3 -c bytea_output=hex -c standard_conforming_strings=on"]
            .compactMap { $0 }.filter { !$0.isEmpty }
        return pairs + [("dbname", url.absoluteString),
                        ("client_encoding", "UTF8"),
                        ("options", options.joined(separator: " "))]
    }
}
