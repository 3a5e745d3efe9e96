@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// A PostgreSQL server that stops dead (`pg_ctl stop -m immediate`) under the client: what was
/// committed is there after the restart, what was not is gone whole, and the broken
/// connections say so with a connection-failure code. Runs on a cluster of its own.
@Suite(.enabled(if: DedicatedPostgresServer.isAvailable, "needs the PostgreSQL server binaries"))
struct PostgresFaultTests {
    /// A commit whose session the server ends while it runs `COMMIT` — an operator's
    /// `pg_terminate_backend`, a failover — reports what became of it. The writer connects
    /// again, waits for the old session to be gone, and looks for the commit's history row:
    /// - ended while a deferred trigger at `COMMIT` sleeps, the transaction is rolled back:
    ///   the commit reports the connection failure, and nothing of it is stored;
    /// - ended while its `COMMIT` waits for a synchronous standby that never answers (its
    ///   transaction committed on the server, as the server's warning says), the commit is
    ///   saved, and `commit()` returns as for any saved commit. Before, it reported the
    ///   connection failure: a caller retrying it saved it twice.
    @Test func aCommitWhoseSessionEndsAtCommitReportsWhetherTheServerSavedIt() throws {
        let (server, admin, context) = try Self.contextWaitingForANeverStandby(tracksHistory: true)
        try admin.execute("""
            CREATE FUNCTION "linger"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(300); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER "linger" AFTER INSERT ON "Person" DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW WHEN (NEW.name = 'rolled back') EXECUTE FUNCTION "linger"()
            """)
        defer { withExtendedLifetime(server) {} }

        let rolledBack = try Self.commitEndingItsSession("rolled back", on: context, whileItWaitsFor: "PgSleep", admin: admin)
        #expect((rolledBack as? PostgresError)?.code.isConnectionFailure == true, "\(String(describing: rolledBack))")
        let saved = try Self.commitEndingItsSession("saved", on: context, whileItWaitsFor: "SyncRep", admin: admin)
        #expect(saved == nil, "\(String(describing: saved))")
        #expect(try admin.allRows("SELECT name FROM \"Person\" ORDER BY \"Z_PK\"") == [[.text("seed")], [.text("saved")]])
    }

    /// Commits a person named `name` from `context`, ends the writer's session once it waits
    /// for `waitEvent`, and returns what the commit reported.
    static func commitEndingItsSession(_ name: String, on context: ContextStack.Context, whileItWaitsFor waitEvent: String,
                                       admin: PostgresConnection) throws -> (any Error)? {
        let outcome = Locked<Result<Void, any Error>?>(nil)
        DispatchQueue.global().async {
            let result = Result<Void, any Error> {
                try context.beginUpdateAndWait { update in
                    try update.create(Person.self).name = name
                    try update.commit()
                }
            }
            outcome.withLock { $0 = result }
        }
        try endTheSession(waitingFor: waitEvent, admin: admin)
        for _ in 0..<6_000 where outcome.withLock({ $0 }) == nil { usleep(10_000) }
        let result: Result<Void, any Error>? = outcome.withLock { $0 }
        if case .failure(let error) = try #require(result, "the commit never returned") { return error }
        return nil
    }

    /// Docs/Postgres.md, "Faults": without history (`tracksHistory: false` on a database
    /// without a history table) whether such a commit was saved stays open — the commit reports
    /// the connection failure though the server saved it.
    @Test func withoutHistoryACommitSavedAsItsSessionEndedReportsTheFailure() throws {
        let (server, admin, context) = try Self.contextWaitingForANeverStandby(tracksHistory: false)
        defer { withExtendedLifetime(server) {} }
        let saved = try Self.commitEndingItsSession("saved", on: context, whileItWaitsFor: "SyncRep", admin: admin)
        #expect((saved as? PostgresError)?.code.isConnectionFailure == true, "\(String(describing: saved))")
        #expect(try admin.allRows("SELECT name FROM \"Person\" ORDER BY \"Z_PK\"") == [[.text("seed")], [.text("saved")]])
        #expect(try admin.scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'Z_HISTORY'") == .integer(0))
    }

    /// A context committing to `.persistentStore` on a server of its own, with a person named
    /// "seed" committed — which reserves a block of keys before reserving would wait — and
    /// from then on every commit waiting at `COMMIT` for a standby that never answers
    /// (`awaitANeverStandby`).
    static func contextWaitingForANeverStandby(tracksHistory: Bool) throws -> (DedicatedPostgresServer, PostgresConnection, ContextStack.Context) {
        let server = try DedicatedPostgresServer()
        let admin = try PostgresConnection(PostgresSettings(url: server.url))
        let stack = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
        try stack.addPostgresStore(url: server.url.addingServerOption("-csynchronous_commit=on"), tracksHistory: tracksHistory)
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try awaitANeverStandby(server, admin: admin)
        return (server, admin, context)
    }

    /// From now on, commits of sessions that ask for it (`synchronous_commit=on`, the stack's)
    /// wait at `COMMIT` for a standby named "nobody", which never answers: their transactions
    /// are committed on the server, and their sessions wait.
    static func awaitANeverStandby(_ server: DedicatedPostgresServer, admin: PostgresConnection) throws {
        try admin.execute("ALTER SYSTEM SET synchronous_commit = 'local'")
        try admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        _ = try admin.scalar("SELECT pg_reload_conf()")
        for _ in 0..<600 where try PostgresConnection(PostgresSettings(url: server.url)).scalar("SHOW synchronous_standby_names") != .text("nobody") {
            usleep(10_000)
        }
    }

    /// Ends, as an operator's `pg_terminate_backend` would, the one session that waits for
    /// `waitEvent`, once it does.
    static func endTheSession(waitingFor waitEvent: String, admin: PostgresConnection) throws {
        let session = "FROM pg_stat_activity WHERE wait_event = '\(waitEvent)'"
        for _ in 0..<6_000 where try admin.scalar("SELECT count(*) \(session)") != .integer(1) { usleep(10_000) }
        let activity = try admin.allRows("SELECT wait_event, state, query FROM pg_stat_activity")
        try #require(try admin.scalar("SELECT count(*) \(session)") == .integer(1), "the commit never waited for \(waitEvent): \(activity)")
        _ = try admin.scalar("SELECT pg_terminate_backend(pid, 10000) \(session)")
    }

    /// The same under a root (Docs/Postgres.md, "Faults"): a commit the root's writer finds
    /// saved after its session was ended at `COMMIT` reports as saved — `flush()` does not
    /// throw, nothing reaches `onError`, and the main context keeps the object.
    @Test @MainActor func underARootACommitFoundSavedAfterItsSessionEndedStaysShown() async throws {
        let server = try DedicatedPostgresServer()
        let admin = try PostgresConnection(PostgresSettings(url: server.url))
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let recorder = ErrorRecorder()
        stack.onError = { recorder.record($0) }
        try stack.addPostgresStore(url: server.url.addingServerOption("-csynchronous_commit=on"))
        let world = try MainContext(stack: stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "seed"
            try update.commit()
        }
        try await stack.flush()
        try Self.awaitANeverStandby(server, admin: admin)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "saved"
            try update.commit()
        }
        try Self.endTheSession(waitingFor: "SyncRep", admin: admin)
        try await stack.flush()
        #expect(recorder.all.isEmpty, "\(recorder.all)")
        await mainQueueTurn()
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["saved", "seed"])
        #expect(try admin.allRows("SELECT name FROM \"Person\" ORDER BY name") == [[.text("saved")], [.text("seed")]])
    }

    @Test func aServerCrashKeepsCommittedSavesAndDropsTheOneInFlight() throws {
        let server = try DedicatedPostgresServer()
        let graph = try Model(Person.self, Pet.self).graph
        let setup = try PostgresConnection(PostgresSettings(url: server.url))
        _ = try PostgresSchemaInstaller.install(StoreSchema(graph: graph, configuration: nil), on: setup, autoMigrating: true)
        let person = graph.entity(for: Person.self)
        func insert(_ key: Int64, _ name: String) -> ChangeSet {
            var row = ObjectRow(entity: person, values: person.defaults)
            row.values[person.properties.firstIndex { $0.name == "name" }!] = .text(name)
            var changes = ChangeSet()
            changes.inserts = [(ObjectID(rootEntity: person.rootDescription, primaryKey: key), row)]
            return changes
        }
        try PostgresWriter.save([insert(1, "committed")], on: setup)

        // A save whose transaction is open when the server dies.
        let writer = try PostgresConnection(PostgresSettings(url: server.url))
        try writer.execute("BEGIN")
        try PostgresWriter.apply(insert(2, "in flight"), on: writer)
        try PostgresWriter.apply(insert(3, "in flight too"), on: writer)
        try server.cluster.crash()

        let error = try #require(throws: PostgresError.self) { try writer.execute("COMMIT") }
        #expect(error.code.isConnectionFailure, "\(error)")
        #expect(writer.isBroken)
        #expect(throws: PostgresError.self) { try PostgresWriter.save([insert(4, "after")], on: setup) }

        try server.cluster.start()
        let fresh = try PostgresConnection(PostgresSettings(url: server.url))
        var names: [String] = []
        try fresh.query("SELECT name FROM \"Person\" ORDER BY \"Z_PK\"") { names.append($0.value(0).stringValue ?? "?") }
        #expect(names == ["committed"], "the committed save survived; the one in flight is gone whole")
        try PostgresWriter.save([insert(2, "again")], on: fresh)
        #expect(try fresh.scalar("SELECT count(*) FROM \"Person\"") == .integer(2))
    }

    /// The same through a stack: a commit made while the server is down fails whole, its error
    /// reaches `flush` (typed, without the password), the main context forgets it, and once the
    /// server is back the next commit and the next read reconnect by themselves.
    @Test @MainActor func aStackRidesOutARestart() async throws {
        let server = try DedicatedPostgresServer()
        var parts = URLComponents(url: server.url, resolvingAgainstBaseURL: false)!
        parts.password = "not-a-secret-to-print"
        let url = parts.url!
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let recorder = ErrorRecorder()
        stack.onError = { recorder.record($0) }
        try stack.addPostgresStore(url: url)
        let world = try MainContext(stack: stack)
        func commit(_ names: [String]) throws {
            try world.beginUpdateAndWait { update in
                for name in names { try update.create(Person.self).name = name }
                try update.create(Pet.self).name = "pet of \(names[0])"
                try update.commit()
            }
        }
        try commit(["a1", "a2"])
        try await stack.flush()
        #expect(try world.fetchCount(Person.self) == 2)

        try server.cluster.crash()
        let commits = Locked<[Commit]>([])
        let observation = stack.observeCommit { commit in commits.withLock { $0.append(commit) } }
        try commit(["b1", "b2"])
        let error = await #expect(throws: PostgresError.self) { try await stack.flush() }
        #expect(error?.code.isConnectionFailure == true, "\(String(describing: error))")
        #expect(!"\(String(describing: error))".contains("not-a-secret-to-print"))
        #expect(recorder.all.count == 1)
        // Announced when committed, taken back when it failed: its inserts come back deleted,
        // though nothing could be read from the server to undo them.
        await mainQueueTurn()
        let seen = commits.withLock { $0 }
        observation.cancel()
        let announced = try #require(seen.first { $0.inserted.count == 3 })
        #expect(seen.contains { Set($0.deleted) == Set(announced.inserted) }, "the failed commit is undone in the main context")

        try server.cluster.start()
        try commit(["c1"])
        try await stack.flush()
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["a1", "a2", "c1"])
        let fresh = try PostgresConnection(PostgresSettings(url: server.url))
        #expect(try fresh.allRows("SELECT name FROM \"Person\" ORDER BY name") == [[.text("a1")], [.text("a2")], [.text("c1")]])
        #expect(try fresh.allRows("SELECT name FROM \"Pet\" ORDER BY name") == [[.text("pet of a1")], [.text("pet of c1")]], "the failed commit is gone whole")

        // Enough new objects to need a new block of keys: the key connection, closed by the
        // restart, is replaced too.
        try commit((0..<40).map { "k\($0)" })
        try await stack.flush()
        #expect(try fresh.scalar("SELECT count(*) FROM \"Person\"") == .integer(43))
    }

    /// Docs/Postgres.md, "Faults", through a stack: the server dies while four threads' commits
    /// are being written. Each commit is a person and two pets that
    /// name it: every commit is stored whole or not at all, every commit that returned is
    /// stored, none twice, and once the server is back the same stack commits again. (Whether
    /// a commit was being written at the very moment of the crash varies from run to run.)
    @Test func commitsInFlightWhenTheServerDiesAreStoredWholeOrNotAtAll() async throws {
        let server = try DedicatedPostgresServer()
        let stack = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
        stack.onError = { _ in }
        try stack.addPostgresStore(url: server.url)
        let context = try Context(stack: stack)
        let saved = Locked<[String]>([])
        let failed = Locked<[String]>([])
        let stop = Locked(false)
        @Sendable func commit(_ name: String) -> Bool {
            do {
                try context.beginUpdateAndWait { update in
                    let person = try update.create(Person.self)
                    person.name = name
                    for suffix in ["a", "b"] {
                        let pet = try update.create(Pet.self)
                        pet.name = "\(name)-\(suffix)"
                        pet.owner = person
                    }
                    try update.commit()
                }
                saved.withLock { $0.append(name) }
                return true
            } catch {
                failed.withLock { $0.append(name) }
                return false
            }
        }
        await onThreads(5) { index in
            if index == 4 {
                // Once commits are flowing, the server dies under them; the committers go on
                // until eight commits have failed. (Each wait gives up after a minute, so that
                // a failure ends the test instead of hanging it.)
                defer { stop.withLock { $0 = true } }
                for _ in 0..<60_000 where saved.withLock({ $0.count }) < 40 { usleep(1_000) }
                guard saved.withLock({ $0.count }) >= 40 else {
                    Issue.record("commits never flowed")
                    return
                }
                do {
                    try server.cluster.crash()
                } catch {
                    Issue.record("the server could not be stopped: \(error)")
                    return
                }
                for _ in 0..<60_000 where failed.withLock({ $0.count }) < 8 { usleep(1_000) }
                return
            }
            var number = 0
            while !stop.withLock({ $0 }) {
                number += 1
                _ = commit("t\(index)-\(number)")
            }
        }
        try server.cluster.start()
        for index in 0..<4 { #expect(commit("after-\(index)"), "the stack commits again once the server is back") }

        let fresh = try PostgresConnection(PostgresSettings(url: server.url))
        var people: [String: Int] = [:]
        try fresh.query("SELECT name FROM \"Person\"") { people[$0.value(0).stringValue ?? "?", default: 0] += 1 }
        var pets: [String: [String]] = [:]
        try fresh.query("SELECT p.name, o.name FROM \"Pet\" p LEFT JOIN \"Person\" o ON o.\"Z_PK\" = p.owner") {
            pets[$0.value(1).stringValue ?? "(none)", default: []].append($0.value(0).stringValue ?? "?")
        }
        #expect(pets["(none)"] == nil, "a pet stored without its person: \(pets["(none)"] ?? [])")
        #expect(people.values.allSatisfy { $0 == 1 }, "a commit stored twice: \(people.filter { $0.value > 1 })")
        for (name, _) in people {
            #expect(pets[name]?.sorted() == ["\(name)-a", "\(name)-b"], "\(name) is stored with \(pets[name] ?? [])")
        }
        let lost = saved.withLock { $0 }.filter { people[$0] == nil }
        #expect(lost.isEmpty, "commits that returned and are not stored: \(lost)")
        #expect(failed.withLock { $0.count } >= 8)
    }

    /// The history listener loses its connection when the server restarts, reconnects by
    /// itself, and delivers what another stack committed after the restart (Docs/History.md).
    @Test @MainActor func theHistoryListenerCatchesUpAfterARestart() async throws {
        let server = try DedicatedPostgresServer()
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let recorder = ErrorRecorder()
        stack.onError = { recorder.record($0) }
        try stack.addPostgresStore(url: server.url)
        let world = try MainContext(stack: stack)
        var commits = stack.allCommits.filter(\.isRemote).makeAsyncIterator()
        let other = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
        try other.addPostgresStore(url: server.url)
        let writer = try Context(stack: other, updateTarget: .persistentStore)
        let before = try writer.commitPerson(named: "before")
        #expect(try #require(await commits.next()).inserted == [before])

        try server.cluster.crash()
        try server.cluster.start()
        // The other stack's writer reconnects on its next commit (the first may meet the
        // broken connection and fail whole).
        var after: ObjectID?
        for _ in 0..<3 where after == nil { after = try? writer.commitPerson(named: "after") }
        let inserted = try #require(after)
        #expect(try #require(await commits.next()).inserted == [inserted])
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["after", "before"])
        #expect(recorder.all.isEmpty, "a lost listener connection is not reported: \(recorder.all)")
    }

    /// Docs/History.md, "Failure modes": a stack that cannot start following the history (the
    /// server is down when its main context is made) reports it once, and tries again by
    /// itself: once the server is back, other stacks' commits reach the main context, though
    /// nothing else asked for remote commits again.
    @Test @MainActor func followingTheHistoryStartsOnceTheServerIsBack() async throws {
        let server = try DedicatedPostgresServer()
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let recorder = ErrorRecorder()
        stack.onError = { recorder.record($0) }
        try stack.addPostgresStore(url: server.url)
        let other = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
        try other.addPostgresStore(url: server.url)
        let writer = try Context(stack: other, updateTarget: .persistentStore)
        let ann = try writer.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            try update.commit()
            return ann.objectID
        }

        try server.cluster.crash()
        let world = try MainContext(stack: stack)
        #expect(recorder.all.count == 1, "the failed start was not reported: \(recorder.all)")
        try server.cluster.start()

        let held = try #require(try world.fetch(Person.self, id: ann))
        // Retries come at most 30 s apart (Stack.followHistoryIfWanted): the loop allows 45 s.
        var merged = false
        for age in 1...450 where !merged {
            _ = try? writer.beginUpdateAndWait { update in
                try #require(try update.fetch(Person.self, id: ann)).age = age
                try update.commit()
            }
            try await Task.sleep(for: .milliseconds(100))
            _ = try world.fetchCount(Pet.self)    // a read applies what was handed over
            merged = held.age == age
        }
        #expect(merged, "no remote commit reached the main context once the server was back")
        #expect(recorder.all.count == 1, "the retries reported again: \(recorder.all)")
    }
}
