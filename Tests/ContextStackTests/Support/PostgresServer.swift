import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
#if canImport(Glibc)
import Glibc
import Testing
#endif

/// The PostgreSQL server the tests run against: the one `CONTEXTSTACK_POSTGRES_URL` names, or
/// else a throwaway cluster this process makes and starts itself, once, on a free port of
/// 127.0.0.1.
///
/// The throwaway cluster is `initdb` into a temporary folder and `pg_ctl start`, as the
/// unprivileged user `nobody` when the tests run as root (PostgreSQL refuses to run as root),
/// with trust authentication, no Unix socket, and `fsync=off` (the tests kill the server, not
/// the machine). It is stopped with `pg_ctl stop -m immediate` and deleted when the test
/// process exits; a cluster left behind by a test process that was killed is stopped and
/// deleted by the next one.
///
/// Each test takes a database of its own (`TestDatabase`), dropped when the test ends.
enum PostgresServer {
    /// Why there is no server, or nil when there is one. Computed once; the first suite that
    /// asks prints the reason, once.
    static let unavailableReason: String? = {
        switch shared {
        case .success: return nil
        case .failure(let error):
            let reason = skipMessage(error)
            print(reason)
            return reason
        }
    }()

    static var isAvailable: Bool { unavailableReason == nil }

    /// The one line printed when the PostgreSQL suites are skipped: why, and how to enable them.
    static func skipMessage(_ error: Unavailable) -> String {
        "PostgreSQL suites skipped: \(error). Install the server (apt-get install postgresql libpq-dev) or set CONTEXTSTACK_POSTGRES_URL to a server the tests may create databases on."
    }

    /// The server's administrative URL (a superuser, database `postgres`).
    static var adminURL: URL {
        get throws { try shared.get().adminURL }
    }

    struct Unavailable: Error, CustomStringConvertible {
        let description: String
    }

    struct Cluster: Sendable {
        let adminURL: URL
        /// The cluster's folder and the binaries that started it, for a cluster of our own.
        let folder: URL?
        let binaries: URL?
        let port: Int
        /// The data folder, for `pg_ctl`.
        var data: URL? { folder?.appendingPathComponent("data") }

        /// Starts the server on its port and waits until it accepts connections.
        func start() throws {
            guard let folder, let data, let binaries else { throw Unavailable(description: "the server at CONTEXTSTACK_POSTGRES_URL is not ours to start") }
            let options = "-p \(port) -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c full_page_writes=off -c max_connections=2500"
            try PostgresServer.run(binaries.appendingPathComponent("pg_ctl"),
                                   ["-D", data.path, "-l", folder.appendingPathComponent("server.log").path, "-w", "-t", "60", "-o", options, "start"])
        }

        /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`): every
        /// connection breaks; committed transactions survive, uncommitted ones are gone.
        func crash() throws {
            guard let data, let binaries else { throw Unavailable(description: "the server at CONTEXTSTACK_POSTGRES_URL is not ours to stop") }
            try PostgresServer.run(binaries.appendingPathComponent("pg_ctl"), ["-D", data.path, "-m", "immediate", "-w", "stop"])
        }

        /// Stops the server if it runs and deletes its folder.
        func stopAndDelete() {
            guard let folder else { return }
            _ = try? crash()
            try? FileManager.default.removeItem(at: folder)
        }
    }

    static let shared: Result<Cluster, Unavailable> = {
        if let url = ProcessInfo.processInfo.environment["CONTEXTSTACK_POSTGRES_URL"], let adminURL = URL(string: url) {
            return .success(Cluster(adminURL: adminURL, folder: nil, binaries: nil, port: adminURL.port ?? 5432))
        }
        guard let binaries else {
            return .failure(Unavailable(description: "no PostgreSQL server binaries (initdb, pg_ctl) were found"))
        }
        removeAbandonedClusters(binaries: binaries)
        do {
            let cluster = try startCluster(binaries: binaries)
            ownCluster = cluster
            atexit { PostgresServer.stopOwnCluster() }
            return .success(cluster)
        } catch {
            return .failure(Unavailable(description: "could not start a throwaway cluster: \(error)"))
        }
    }()

    /// The installed server binaries, if any.
    static let binaries = findBinaries(installed: URL(fileURLWithPath: "/usr/lib/postgresql"),
                                       path: ProcessInfo.processInfo.environment["PATH"] ?? "")

    /// The cluster this process started, for the exit handler (which cannot capture).
    nonisolated(unsafe) private static var ownCluster: Cluster?

    // MARK: - Starting and stopping

    static let folderPrefix = "contextstack-pg-"

    /// The folder holding `initdb` and `pg_ctl`: the newest version under `installed` (Debian's
    /// `/usr/lib/postgresql/<version>/bin`), else the first folder of `path` that has both.
    static func findBinaries(installed: URL, path: String) -> URL? {
        let manager = FileManager.default
        let versions = (try? manager.contentsOfDirectory(atPath: installed.path)) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let bin = installed.appendingPathComponent(version).appendingPathComponent("bin")
            if manager.isExecutableFile(atPath: bin.appendingPathComponent("pg_ctl").path),
               manager.isExecutableFile(atPath: bin.appendingPathComponent("initdb").path) { return bin }
        }
        for directory in path.split(separator: ":") {
            let bin = URL(fileURLWithPath: String(directory))
            if manager.isExecutableFile(atPath: bin.appendingPathComponent("pg_ctl").path),
               manager.isExecutableFile(atPath: bin.appendingPathComponent("initdb").path) { return bin }
        }
        return nil
    }

    /// The user the server runs as: `nobody` when we are root, else ourselves.
    private static var runsAsNobody: Bool { getuid() == 0 }

    static func startCluster(binaries: URL) throws -> Cluster {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(folderPrefix + UUID().uuidString.prefix(8))
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        try String(getpid()).write(to: folder.appendingPathComponent("owner.pid"), atomically: true, encoding: .utf8)
        if runsAsNobody { chown(folder.path, 65534, 65534) }
        let data = folder.appendingPathComponent("data")
        try run(binaries.appendingPathComponent("initdb"),
                ["-D", data.path, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        // A free port can be taken between choosing it and the server binding it: try a few.
        var lastError: (any Error)?
        for _ in 0..<5 {
            let port = try freePort()
            let cluster = Cluster(adminURL: URL(string: "postgres://postgres@127.0.0.1:\(port)/postgres")!, folder: folder, binaries: binaries, port: port)
            do {
                try cluster.start()
                return cluster
            } catch {
                lastError = error
            }
        }
        throw lastError ?? Unavailable(description: "pg_ctl start failed")
    }

    static func stopOwnCluster() {
        ownCluster?.stopAndDelete()
    }

    /// Stops and deletes clusters whose test process no longer runs (it was killed before its
    /// exit handler could).
    private static func removeAbandonedClusters(binaries: URL) {
        let temporary = FileManager.default.temporaryDirectory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? []
        for name in names where name.hasPrefix(folderPrefix) {
            let folder = temporary.appendingPathComponent(name)
            guard let text = try? String(contentsOf: folder.appendingPathComponent("owner.pid"), encoding: .utf8),
                  let owner = Int32(text), kill(owner, 0) != 0, errno == ESRCH else { continue }
            _ = try? run(binaries.appendingPathComponent("pg_ctl"), ["-D", folder.appendingPathComponent("data").path, "-m", "immediate", "-w", "stop"])
            try? FileManager.default.removeItem(at: folder)
        }
    }

    /// Runs a server binary to completion (as `nobody` when we are root), throwing its output
    /// when it fails.
    ///
    /// Its output goes to a file, not a pipe: `pg_ctl start` leaves a server behind that
    /// inherits it, so a pipe would never reach its end (`Process.waitUntilExit` was also seen
    /// never to return for it; `ChildProcess` waits for the child alone).
    @discardableResult
    fileprivate static func run(_ executable: URL, _ arguments: [String]) throws -> String {
        let command = runsAsNobody
            ? ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", executable.path] + arguments
            : [executable.path] + arguments
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("contextstack-pgrun-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: log) }
        let output = open(log.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw Unavailable(description: "could not create \(log.path)") }
        defer { close(output) }
        let status: Int32
        do {
            status = try ChildProcess(command, output: .descriptor(output), errors: .output).waitUntilExit()
        } catch {
            throw Unavailable(description: "\(error)")
        }
        let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        // Exited normally with status 0: the low 7 bits (the signal) and the exit code are 0.
        guard status == 0 else {
            throw Unavailable(description: "\(executable.lastPathComponent) failed (status \(status)): \(text.suffix(600))")
        }
        return text
    }

    /// A TCP port on 127.0.0.1 that nothing listens on at the moment.
    private static func freePort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Unavailable(description: "socket() failed") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
        }
        guard bound else { throw Unavailable(description: "could not find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A database of its own for one test, on the test server: created empty, dropped (with
/// whatever connections are still open to it) by `drop()` or when the value is released.
final class TestDatabase: Sendable {
    let name: String
    let url: URL
    private let dropped = Locked(false)

    init() throws {
        let admin = try PostgresServer.adminURL
        name = "cs_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let connection = try PostgresConnection(PostgresSettings(url: admin))
        try connection.execute("CREATE DATABASE \"\(name)\"")
        var parts = URLComponents(url: admin, resolvingAgainstBaseURL: false)!
        parts.path = "/" + name
        url = parts.url!
    }

    func drop() {
        guard dropped.withLock({ let was = $0; $0 = true; return !was }) else { return }
        if let admin = try? PostgresServer.adminURL, let connection = try? PostgresConnection(PostgresSettings(url: admin)) {
            try? connection.execute("DROP DATABASE IF EXISTS \"\(name)\" WITH (FORCE)")
        }
    }

    deinit { drop() }
}

/// A test database of its own holding a model's tables, as the PostgreSQL store installs them,
/// and a connection to it.
struct PostgresTables {
    let database: TestDatabase
    let connection: PostgresConnection
    let graph: ModelGraph
    let schema: StoreSchema

    init(_ types: [ManagedObject.Type]) throws {
        database = try TestDatabase()
        connection = try PostgresConnection(PostgresSettings(url: database.url))
        graph = try Model(types).graph
        schema = StoreSchema(graph: graph, configuration: nil)
        _ = try PostgresSchemaInstaller.install(schema, on: connection, autoMigrating: true)
    }
}

/// A cluster of its own, for the tests that stop the server: the shared one serves every
/// other test running at the same time. Stopped and deleted when released (or, if the test
/// process is killed first, by the next test process).
final class DedicatedPostgresServer: Sendable {
    let cluster: PostgresServer.Cluster

    /// Whether this machine can start clusters (it has the server binaries).
    static var isAvailable: Bool { PostgresServer.binaries != nil }

    init() throws {
        guard let binaries = PostgresServer.binaries else { throw PostgresServer.Unavailable(description: "no PostgreSQL server binaries") }
        cluster = try PostgresServer.startCluster(binaries: binaries)
    }

    /// A database of the cluster's own (`postgres`) as a URL.
    var url: URL { cluster.adminURL }

    deinit { cluster.stopAndDelete() }
}

/// A schema of its own for one test, in one database the test process shares
/// (`contextstack_stores`): what the conformance suites' PostgreSQL stores live in. Creating a
/// schema takes a millisecond where a database takes a quarter of a second, and the suites
/// make hundreds. The store's URL names the schema in libpq's `options` (`search_path`), so
/// the store sees only its own tables, as it would in a database of its own; connections carry
/// the schema's name as their `application_name`, so `drop()` can end them first.
final class TestSchema: Sendable {
    let name: String
    let url: URL
    private let dropped = Locked(false)

    /// The database every test schema lives in, created once per test process and dropped
    /// when it exits.
    /// The database every test schema lives in.
    static var sharedDatabase: URL {
        get throws { try database.get() }
    }

    private static let database: Result<URL, PostgresServer.Unavailable> = {
        do {
            let admin = try PostgresServer.adminURL
            let name = "cs_stores_\(getpid())"
            let connection = try PostgresConnection(PostgresSettings(url: admin))
            try connection.execute("DROP DATABASE IF EXISTS \"\(name)\" WITH (FORCE)")
            try connection.execute("CREATE DATABASE \"\(name)\"")
            atexit { TestSchema.dropDatabase() }
            var parts = URLComponents(url: admin, resolvingAgainstBaseURL: false)!
            parts.path = "/" + name
            return .success(parts.url!)
        } catch {
            return .failure(PostgresServer.Unavailable(description: "could not create the test database: \(error)"))
        }
    }()

    init() throws {
        let database = try Self.database.get()
        name = "cs_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        try Self.creator.execute("CREATE SCHEMA \"\(name)\"")
        var parts = URLComponents(url: database, resolvingAgainstBaseURL: false)!
        parts.queryItems = [URLQueryItem(name: "options", value: "-csearch_path=\(name)"), URLQueryItem(name: "application_name", value: name)]
        url = parts.url!
    }

    /// One connection to the shared database for the schemas' `CREATE` and one for their
    /// `DROP`, instead of a new one each: a connection costs PostgreSQL a process, 15–20 ms on
    /// this 2-core machine, and most suites make their stores on the main actor, where every
    /// millisecond delays every other `@MainActor` test of the run.
    private static let creator = SharedConnection()
    private static let dropper = SharedConnection()
    /// Where schemas are dropped: off the thread that ends the test (often the main actor),
    /// one at a time.
    private static let dropQueue = DispatchQueue(label: "ContextStackTests.TestSchema.drop")

    private static func dropDatabase() {
        guard let admin = try? PostgresServer.adminURL, let connection = try? PostgresConnection(PostgresSettings(url: admin)) else { return }
        try? connection.execute("DROP DATABASE IF EXISTS \"cs_stores_\(getpid())\" WITH (FORCE)")
    }

    /// Ends the schema's connections and drops it, on `dropQueue`: the test does not wait for
    /// it (what is left at the end goes with the database, `dropDatabase`).
    func drop() {
        guard dropped.withLock({ let was = $0; $0 = true; return !was }) else { return }
        let name = name
        Self.dropQueue.async {
            try? Self.dropper.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ? AND pid <> pg_backend_pid()", [.text(name)])
            try? Self.dropper.execute("DROP SCHEMA IF EXISTS \"\(name)\" CASCADE")
        }
    }

    deinit { drop() }
}

/// Waits until some connection to the database at `url` waits for a lock (a writer, for a row
/// or a key a test holds in another transaction); false after five seconds.
func waitForALockWaiter(_ url: URL, blockedBy holder: Int32) async throws -> Bool {
    let watcher = try PostgresConnection(PostgresSettings(url: url))
    // Only a wait for `holder`'s locks counts: the cluster is shared by tests running at once.
    for _ in 0..<500 {
        if try watcher.scalar("SELECT count(*) FROM pg_stat_activity WHERE \(holder) = ANY(pg_blocking_pids(pid))") != .integer(0) { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return false
}

/// Waits until `count` connections wait for `holder`'s locks at once; whether they did
/// within five seconds (a guard against hanging, not a timing assertion).
func waitForLockWaiters(_ count: Int, url: URL, blockedBy holder: Int32) async throws -> Bool {
    let watcher = try PostgresConnection(PostgresSettings(url: url))
    for _ in 0..<500 {
        if let waiting = try watcher.scalar("SELECT count(*) FROM pg_stat_activity WHERE \(holder) = ANY(pg_blocking_pids(pid))").int64Value,
           waiting >= count { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return false
}

/// Waits until a connection waits for `holder`'s locks (`waitForALockWaiter`), then commits
/// `holder`'s transaction, returning whether one waited. All of it off the main actor: a
/// `@MainActor` test that waited and then committed would hold the lock while it waits for its
/// turn on the main actor, which the other tests running at once can keep for longer than a
/// statement may wait for a lock (`statement_timeout`).
func commitOnceAWriterWaits(_ holder: sending PostgresConnection, url: URL) async throws -> Bool {
    let waited = try await waitForALockWaiter(url, blockedBy: holder.backendPID)
    try holder.execute("COMMIT")
    return waited
}

/// Waits until every transaction the server had started when called has ended (any database,
/// any test): PostgreSQL's history returns a transaction only once every older one has ended
/// (Docs/History.md, "Tokens"), so a test that compares the history with the rows waits for
/// other tests' open transactions first. Records an issue, naming them, after a minute.
/// Suspends rather than blocks: the transactions waited for may be other tests' on the main
/// actor.
func settleHistory(_ url: URL) async throws {
    let db = try PostgresConnection(PostgresSettings(url: url))
    guard let horizon = try db.scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").int64Value else { return }
    for _ in 0..<6000 {
        if let oldest = try db.scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").int64Value, oldest >= horizon { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    let open = try db.allRows("SELECT application_name, state, (now() - xact_start)::text, left(query, 120) FROM pg_stat_activity WHERE backend_xid IS NOT NULL")
    Issue.record("transactions started before the check stayed open for a minute: \(open)")
}

extension TestStore {
    /// `settleHistory` for a PostgreSQL store; nothing to wait for on SQLite.
    func settleHistory() async throws {
        if let database { try await ContextStackTests.settleHistory(database.url) }
    }
}

/// A connection to the tests' shared database (`TestSchema`), used by one caller at a time and
/// opened again when it broke (a fault test restarts no shared server, but a statement may
/// still fail it).
final class SharedConnection: Sendable {
    private let connection = Locked<PostgresConnection?>(nil)

    func execute(_ sql: String) throws {
        try use { try $0.execute(sql) }
    }

    func run(_ sql: String, _ arguments: [Value]) throws {
        try use { _ = try $0.run(sql, arguments) }
    }

    private func use(_ body: (PostgresConnection) throws -> Void) throws {
        try connection.withLock { connection in
            if connection == nil || connection?.isBroken == true {
                connection = try PostgresConnection(PostgresSettings(url: TestSchema.sharedDatabase))
            }
            try body(connection!)
        }
    }
}

extension URL {
    /// This PostgreSQL URL with `option` added to libpq's `options` (`-cname=value`, a space
    /// escaped with a backslash): a setting for the sessions of whatever connects with it, as a
    /// database's or a role's default would give them.
    func addingServerOption(_ option: String) -> URL {
        var parts = URLComponents(url: self, resolvingAgainstBaseURL: false)!
        var items = parts.queryItems ?? []
        if let index = items.firstIndex(where: { $0.name == "options" }) {
            items[index].value = (items[index].value ?? "") + " " + option
        } else {
            items.append(URLQueryItem(name: "options", value: option))
        }
        parts.queryItems = items
        return parts.url!
    }
}
