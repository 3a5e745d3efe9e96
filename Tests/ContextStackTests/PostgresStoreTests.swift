@testable import ContextStack
import ContextStackPostgres
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// Adding PostgreSQL stores to a stack: what Docs/Postgres.md ("Set up") says is allowed and
/// what is refused. (Everything a store does once added is the behaviour suites' business: they
/// run on PostgreSQL too.)
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresStoreTests {
    /// The URL's password reaches no line of `stack.trace`, from adding the store through a
    /// commit and a read (Docs/Postgres.md, "Connection settings").
    @Test @MainActor func thePasswordNeverReachesTheTrace() async throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        var parts = URLComponents(url: schema.url, resolvingAgainstBaseURL: false)!
        parts.password = "not-a-secret-to-print"
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let lines = Locked<[String]>([])
        stack.trace { line in lines.withLock { $0.append(line) } }
        try stack.addPostgresStore(url: parts.url!)
        let world = try MainContext(stack: stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ada"
            try update.commit()
        }
        try await stack.flush()
        #expect(try world.fetchCount(Person.self) == 1)
        let traced = lines.withLock { $0 }
        #expect(traced.contains { $0.contains("INSERT INTO \"Person\"") }, "\(traced)")
        #expect(!traced.contains { $0.contains("not-a-secret-to-print") })
    }

    /// Several hosts, for failover (Docs/Postgres.md, "Connection settings"): Foundation's
    /// `URL(string:)` gives `nil` for `h1:5432,h2:5433` in the host part, so the hosts and their
    /// ports go in parameters, and libpq goes on to the next when one does not answer — here a
    /// port nothing listens on, then the server.
    @Test func aURLWithSeveralHostsInItsParametersGoesOnToTheNext() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let given = try #require(URLComponents(url: schema.url, resolvingAgainstBaseURL: false))
        var parts = URLComponents()
        parts.scheme = "postgres"
        parts.host = ""
        parts.path = given.path
        parts.queryItems = (given.queryItems ?? []) + [
            URLQueryItem(name: "host", value: "127.0.0.1,\(given.host ?? "127.0.0.1")"),
            URLQueryItem(name: "port", value: "1,\(given.port ?? 5432)"),
        ] + [("user", given.user), ("password", given.password)].compactMap { name, value in value.map { URLQueryItem(name: name, value: $0) } }
        let url = try #require(parts.url)
        let stack = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
        try stack.addPostgresStore(url: url)
        let context = try Context(stack: stack)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ada"
            try update.commit()
        }
        let count = try context.beginUpdateAndWait { try $0.fetchCount(Person.self) }
        #expect(count == 1)

        // Hosts sharing a port, in the URL's host part: 127.0.0.2 (loopback, where the test
        // server does not listen), then the server.
        var shared = given
        shared.host = "127.0.0.2,\(given.host ?? "127.0.0.1")"
        let sharedURL = try #require(shared.url)
        let second = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
        try second.addPostgresStore(url: sharedURL)
        #expect(try Context(stack: second).beginUpdateAndWait { try $0.fetchCount(Person.self) } == 1)
        // The second host answered (with CONTEXTSTACK_POSTGRES_URL on a server listening on
        // every address, the first would, and the fallback is not shown).
        if given.host == "127.0.0.1" {
            let answered = try PostgresConnection(PostgresSettings(url: sharedURL)).scalar("SELECT host(inet_server_addr())")
            #expect(answered == .text("127.0.0.1"), "\(answered)")
        }
    }

    /// Docs/Postgres.md, "Why libpq", and the README: under `.objectTrump`, the default, a save
    /// is one round trip (its statements go out with `BEGIN` and `COMMIT` in one pipeline),
    /// and a read by ID before it one more (on the idle writer connection), as raw libpq's
    /// read-modify-write is two. Without history, whose doorbell can go out alone a moment
    /// later.
    @Test func aReadModifyWriteIsTwoRoundTrips() throws {
        let store = try TestStore(.postgres, tracksHistory: false)
        let postgres = try #require(store.stack.store as? PostgresStore)
        func roundTrips() -> Int { postgres.writer.withLock { $0?.roundTrips ?? 0 } }
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let ann = try context.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            try update.commit()
            return ann.objectID
        }
        func readModifyWrite(_ age: Int) throws -> [Int] {
            try context.beginUpdateAndWait { update in
                let start = roundTrips()
                let person = try #require(try update.fetch(Person.self, id: ann))
                let afterRead = roundTrips()
                person.age = age
                try update.commit()
                return [afterRead - start, roundTrips() - afterRead]
            }
        }
        _ = try readModifyWrite(1)    // prepares the read's and the write's statements
        #expect(try readModifyWrite(2) == [1, 1])
        #expect(try readModifyWrite(3) == [1, 1])
        #expect(try store.writtenRows("SELECT age FROM \"Person\"") == [[.integer(3)]])
    }

    /// Docs/Postgres.md, "A commit waiting for another process's locks": a commit alone waits
    /// for locks at most 50 ms, set in its own transaction (`SET LOCAL`); the store creates no
    /// foreign key constraints ("What the store creates").
    @Test func aCommitWaitsForLocksAtMostFiftyMillisecondsAndTheStoreHasNoForeignKeys() throws {
        let store = try TestStore(.postgres)
        let statements = Locked<[String]>([])
        store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
            let rex = try update.create(Pet.self)
            rex.owner = try update.create(Person.self)
            try update.commit()
        }
        store.stack.trace(nil)
        #expect(statements.withLock { $0 }.filter { $0.contains("lock_timeout") } == ["SET LOCAL lock_timeout = '50ms'"], "\(statements.withLock { $0 })")
        let url = try #require(store.database?.url)
        let admin = try PostgresConnection(PostgresSettings(url: url))
        #expect(try admin.scalar("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = current_schema()::regnamespace") == .integer(0))
        #expect(try admin.scalar("SELECT count(*) FROM pg_constraint WHERE contype = 'p' AND connamespace = current_schema()::regnamespace").int64Value ?? 0 >= 2,
                "the query sees the store's schema: its tables' primary keys")
    }

    /// Batch operations add one to the version of every row they change, as the writer's
    /// updates do, so that another process's commit that read a row before sees it changed.
    @Test @MainActor func batchOperationsAddOneToTheRowVersion() async throws {
        let store = try TestStore(.postgres)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let owner = try update.create(Person.self)
            owner.name = "Ada"
            try update.create(Pet.self).owner = owner
            try update.commit()
        }
        try await store.stack.flush()
        let versions = { try store.writtenRows("SELECT (SELECT \"Z_VERSION\" FROM \"Person\"), (SELECT \"Z_VERSION\" FROM \"Pet\")") }
        let before = try versions()
        try world.beginUpdateAndWait { update in
            #expect(try update.batchUpdate(Person.self, set: ["age": .integer(41)]) == 1)
            try update.commit()
        }
        try await store.stack.flush()
        let after = try versions()
        #expect(after[0][0].intValue == before[0][0].intValue.map { $0 + 1 }, "\(before) → \(after)")
        #expect(after[0][1] == before[0][1])
    }

    /// Docs/Postgres.md: a string holding U+0000 cannot go to PostgreSQL in a condition either.
    /// A fetch, a count and a `fetchOrCreate` with one throw `PostgresError` 22021 (where
    /// SQLite would match the rows it names), and nothing is created.
    @Test func aConditionWithU0000ThrowsCharacterNotInRepertoire() throws {
        let store = try TestStore(.postgres, tracksHistory: false)
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "a"
            try update.commit()
        }
        try context.beginUpdateAndWait { update in
            for attempt in [{ _ = try update.fetchAll(Person.self, %"name" == "a\u{0}b") },
                            { _ = try update.fetchCount(Person.self, %"name" < "a\u{0}b") },
                            { _ = try update.fetchOrCreate(Person.self, %"name" == "a\u{0}b") }] as [() throws -> Void] {
                let error = try #require(throws: PostgresError.self) { try attempt() }
                #expect(error.code == .characterNotInRepertoire)
            }
        }
        #expect(try store.writtenRows("SELECT name FROM \"Person\"") == [[.text("a")]])
    }

    /// Docs/Postgres.md: saving a string that holds U+0000 fails the commit whole with
    /// `PostgresError` 22021 — also inside a group commit, where the other commits are stored.
    /// The value is refused as the commit's statements are queued, after some of them went
    /// out: the NUL is in the person of one commit and in the pet of another, so that in one
    /// of them a row of the commit is already sent when it fails.
    @Test @MainActor func aCommitWithU0000FailsWholeAndTheRestOfItsGroupIsStored() async throws {
        let store = try TestStore(.postgres)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        func commit(person: String, pet: String) throws {
            try world.beginUpdateAndWait { update in
                let owner = try update.create(Person.self)
                owner.name = person
                let rex = try update.create(Pet.self)
                rex.name = pet
                rex.owner = owner
                try update.commit()
            }
        }
        try commit(person: "seed", pet: "seed's")
        try await store.stack.flush()
        let statements = Locked<[String]>([])
        store.stack.trace { sql in statements.withLock { $0.append(sql) } }
        defer { store.stack.trace(nil) }
        try store.holdingTheWriter {
            try commit(person: "before", pet: "before's")
            try commit(person: "bad\u{0}person", pet: "bad person's")
            try commit(person: "middle", pet: "middle's")
            try commit(person: "bad pet's owner", pet: "bad\u{0}pet")
            try commit(person: "after", pet: "after's")
        }
        let error = await #expect(throws: PostgresError.self) { try await store.stack.flush() }
        #expect(error?.code == .characterNotInRepertoire, "\(String(describing: error))")
        try? await store.stack.flush()
        #expect(statements.withLock { $0 }.contains { $0.hasPrefix("SAVEPOINT") }, "written as a group")
        #expect(try store.writtenRows("SELECT o.name, p.name FROM \"Person\" o FULL JOIN \"Pet\" p ON p.owner = o.\"Z_PK\" ORDER BY o.name")
                == [["after", "after's"], ["before", "before's"], ["middle", "middle's"], ["seed", "seed's"]].map { $0.map(Value.text) })
        #expect(recorder.all.count == 2)
        await mainQueueTurn()
        #expect(try world.fetchAll(Person.self, orderBy: .ascending("name")).map(\.name) == ["after", "before", "middle", "seed"])
    }

    /// History.md, "Turning it on": once a database has the history table, a stack that adds
    /// the store with `tracksHistory: false` writes history too; one that added it before
    /// history was turned on does not notice, and writes none.
    @Test func aStackWithoutHistoryWritesItOnceTheDatabaseHasIt() async throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        func stack(tracksHistory: Bool) throws -> Stack {
            let stack = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
            try stack.addPostgresStore(url: schema.url, tracksHistory: tracksHistory)
            return stack
        }
        func commitPerson(_ name: String, on stack: Stack) throws -> ObjectID {
            try Context(stack: stack, updateTarget: .persistentStore).beginUpdateAndWait { update in
                let person = try update.create(Person.self)
                person.name = name
                try update.commit()
                return person.objectID
            }
        }
        let before = try stack(tracksHistory: false)
        let tracking = try stack(tracksHistory: true)
        let after = try stack(tracksHistory: false)
        _ = try commitPerson("before", on: before)
        let recorded = try commitPerson("after", on: after)
        try await settleHistory(schema.url)
        #expect(try tracking.history(after: nil).map { $0.changes.map(\.objectID) } == [[recorded]])
        #expect(try after.history(after: nil).count == 1)
        let notTracked = #expect(throws: HistoryError.self) { try before.history(after: nil) }
        #expect(notTracked?.code == .notTracked)
    }

    /// Adding a store is one transaction, the history table with the model's tables: when the
    /// history table cannot be made (here a type of its name is in the way), nothing of the
    /// store stays. (It was made in a second transaction, after the model's tables were in.)
    @Test func aStoreWhoseHistoryTableFailsLeavesTheDatabaseAsItWas() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let admin = try PostgresConnection(PostgresSettings(url: schema.url))
        try admin.execute("CREATE TYPE \"Z_HISTORY\" AS ENUM ('in the way')")
        let stack = try Stack(model: Model(Person.self, Pet.self))
        #expect(throws: PostgresError.self) { try stack.addPostgresStore(url: schema.url) }
        #expect(try admin.allRows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()") == [])
        // Without history, the same database takes the store.
        try Stack(model: Model(Person.self, Pet.self)).addPostgresStore(url: schema.url, tracksHistory: false)
        #expect(try admin.scalar("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'Person'") == .integer(1))
    }

    /// A server that ends a stack's sessions — as a fast shutdown, a failover or an
    /// administrator does, telling each client `57P01` before it closes — costs the stack
    /// nothing once it is back: the key connection, the writer, the readers and the history
    /// listener are replaced at their next use, and no error reaches the app. (The key
    /// connection took `57P01` for an error of its own, so the first `create` of a new entity
    /// threw it; the listener reported it to `onError`.)
    @Test @MainActor func sessionsTheServerEndsAreReplacedWithoutAnError() async throws {
        let store = try TestStore(.postgres)
        let schema = try #require(store.database)
        let recorder = ErrorRecorder()
        store.stack.onError = { recorder.record($0) }
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Before"
            try update.commit()
        }
        try await store.stack.flush()
        #expect(try world.fetchCount(Person.self) == 1)

        // Every session of the stack's (they carry the schema's name as `application_name`),
        // each waited for until it is gone.
        let admin = try PostgresConnection(PostgresSettings(url: schema.url))
        let ended = try admin.scalar("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = ? AND pid <> pg_backend_pid()",
                                     [.text(schema.name)])
        // At least the key connection, the writer and the history listener.
        #expect((ended.intValue ?? 0) >= 3, "\(ended)")

        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "After"
            try update.create(Pet.self).name = "First pet"
            try update.commit()
        }
        try await store.stack.flush()
        #expect(try world.fetchCount(Person.self) == 2)
        #expect(try world.fetchCount(Pet.self) == 1)
        #expect(recorder.all.isEmpty, "\(recorder.all)")
    }

    @Test func configurationsShareOneDatabaseEachWithItsOwnDescription() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let stack = try Stack(model: splitModel())
        try stack.addPostgresStore(url: schema.url, configuration: "Database")
        try stack.addPostgresStore(url: schema.url, configuration: "InMemory")
        // The same again, with the same settings, is nothing.
        try stack.addPostgresStore(url: schema.url, configuration: "Database")
        let changed = try #require(throws: StoreError.self) {
            try stack.addPostgresStore(url: schema.url, configuration: "Database", autoMigrating: false)
        }
        #expect(changed.code == .alreadyAdded)
        let keys = try PostgresConnection(PostgresSettings(url: schema.url)).allRows("SELECT key FROM \"Z_METADATA\" ORDER BY key")
        #expect(keys == [[.text("format")], [.text("hash:Database")], [.text("hash:InMemory")], [.text("models:Database")], [.text("models:InMemory")],
                         [.text("schema:Database")], [.text("schema:InMemory")]])

        // A second stack opening the same database finds both parts as they are.
        let again = try Stack(model: splitModel())
        try again.addPostgresStore(url: schema.url, configuration: "InMemory")
        try again.addPostgresStore(url: schema.url, configuration: "Database")
    }

    @Test func aStackKeepsItsPostgreSQLStoresInOneDatabaseAndDoesNotMixKinds() throws {
        let first = try TestSchema()
        let second = try TestSchema()
        defer { first.drop(); second.drop() }
        let stack = try Stack(model: splitModel())
        try stack.addPostgresStore(url: first.url, configuration: "Database")
        let elsewhere = try #require(throws: StoreError.self) {
            try stack.addPostgresStore(url: second.url, configuration: "InMemory")
        }
        #expect(elsewhere.code == .alreadyAdded)
        #expect(elsewhere.message.contains("one database"))
        let sqlite = try #require(throws: StoreError.self) { try stack.addInMemoryStore(configuration: "InMemory") }
        #expect(sqlite.code == .alreadyAdded)

        let local = try Stack(model: splitModel())
        try local.addInMemoryStore(configuration: "InMemory")
        let mixed = try #require(throws: StoreError.self) { try local.addPostgresStore(url: first.url, configuration: "Database") }
        #expect(mixed.code == .alreadyAdded)
    }

    @Test func aURLThatIsNotPostgreSQLsIsRefusedWithoutItsPassword() throws {
        let stack = try Stack(model: Model(Person.self, Pet.self))
        let error = try #require(throws: PostgresError.self) {
            try stack.addPostgresStore(url: URL(string: "mysql://app:hunter2@db/app")!)
        }
        #expect(error.code == .cannotConnect)
        #expect(!"\(error)".contains("hunter2"))
        // libpq quotes a URL value it cannot decode, which may be the password.
        let undecodable = try #require(throws: PostgresError.self) {
            try stack.addPostgresStore(url: URL(string: "postgres://app:hun%00ter2@127.0.0.1:1/app")!)
        }
        #expect(undecodable.code == .cannotConnect && undecodable.message.contains("forbidden value %00"), "\(undecodable)")
        #expect(!"\(undecodable)".contains("ter2"), "\(undecodable)")
        // The same for a password given as a parameter.
        let parameter = try #require(throws: PostgresError.self) {
            try stack.addPostgresStore(url: URL(string: "postgres://app@127.0.0.1:1/app?password=hun%00ter2")!)
        }
        #expect(parameter.code == .cannotConnect && parameter.message.contains("forbidden value %00"), "\(parameter)")
        #expect(!"\(parameter)".contains("ter2"), "\(parameter)")
        #expect(undecodable.message.contains("***") && parameter.message.contains("***"), "replaced, not cut: \(undecodable) \(parameter)")
    }

    /// Docs/Postgres.md, "Connection settings": messages name the server without the password,
    /// with the parameters that name it where the URL gives them there (several hosts), and no
    /// other parameter.
    @Test func messagesNameTheServerWithoutThePassword() throws {
        func named(_ url: String) throws -> String { PostgresSettings(url: try #require(URL(string: url))).redactedURL }
        #expect(try named("postgres://app:hunter2@db:5432/app?sslmode=require&application_name=api") == "postgres://app@db:5432/app")
        #expect(try named("postgres:///app?host=db1,db2&port=5432,5433&user=app&password=hunter2&target_session_attrs=read-write")
                == "postgres:///app?host=db1,db2&port=5432,5433&user=app")
        #expect(try named("postgres://app@db1,db2/app?sslpassword=hunter2") == "postgres://app@db1,db2/app")
    }

    /// A server that closes idle sessions (`idle_session_timeout`) tells each one `57P05` at
    /// its next statement: a connection failure, after which the stack connects again — its
    /// writer, its readers, and the connection that reserves keys, which took the code for an
    /// error of the statement and made `create` throw.
    @Test func aStackGoesOnAfterTheServerClosedItsIdleSessions() async throws {
        #expect(PostgresError.Code.idleSessionTimeout.isConnectionFailure && PostgresError.Code.idleInTransactionSessionTimeout.isConnectionFailure)
        let schema = try TestSchema()
        defer { schema.drop() }
        let url = schema.url.addingServerOption("-cidle_session_timeout=200")
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addPostgresStore(url: url, tracksHistory: false)
        let context = try ContextStack.Context(stack: stack, updateTarget: .persistentStore)
        try context.beginUpdateAndWait { update in
            try update.create(Person.self).name = "first"    // the first block of keys
            try update.commit()
        }
        for round in 0..<2 {
            // Idle for longer than the server allows: every session of the stack is closed.
            try await Task.sleep(for: .milliseconds(700))
            try context.beginUpdateAndWait { update in
                for index in 0..<40 { try update.create(Person.self).name = "p\(round).\(index)" }    // past the block
                try update.commit()
            }
            try await Task.sleep(for: .milliseconds(700))
            #expect(try context.beginUpdateAndWait { try $0.fetchCount(Person.self) } == 41 + 40 * round)
        }
    }

    /// What Docs/Postgres.md's settings table says the store's connections carry, and how many
    /// it keeps open: the writer, the key connection, the history listener (a main context
    /// receives remote commits), and at most four idle readers.
    @Test @MainActor func connectionsCarryTheDocumentedSettingsAndStayFew() async throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        #expect(PostgresSettings(url: schema.url).keywordsAndValues.first { $0.0 == "connect_timeout" }?.1 == "10")
        let plain = try connectionOutsideTheStack(schema)
        #expect(try plain.scalar("SHOW application_name") == .text("ContextStack"))
        #expect(try plain.scalar("SHOW client_encoding") == .text("UTF8"))
        #expect(try plain.scalar("SHOW statement_timeout") == .text("1min"))

        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addPostgresStore(url: schema.url)
        let world = try MainContext(stack: stack)
        for round in 0..<20 {
            try world.beginUpdateAndWait { update in
                try update.create(Person.self).name = "p\(round)"
                try update.commit()
            }
            _ = try world.fetchAll(Person.self)
        }
        try await stack.flush()
        // Reads on several threads at once, then idle again.
        let contexts = try (0..<8).map { _ in try Context(stack: stack, updateTarget: .persistentStore) }
        await withTaskGroup(of: Void.self) { group in
            for context in contexts {
                group.addTask { _ = try? await context.transaction { try $0.fetchCount(Person.self) } }
            }
        }
        // A reader closed beyond the four kept idle is gone from the server a moment later (its
        // backend exits after the client's goodbye): wait for that, a few seconds at most.
        var open = try connectionsOfTheStack(schema, seenFrom: plain)
        for _ in 0..<100 where !(3...7).contains(open.int64Value ?? 0) {
            try await Task.sleep(for: .milliseconds(50))
            open = try connectionsOfTheStack(schema, seenFrom: plain)
        }
        #expect((3...7).contains(open.int64Value ?? 0), "\(open) connections")
        withExtendedLifetime(world) {}
    }

    /// A window over a condition filtered in memory is taken after the filter: SQL's superset
    /// holds rows that do not match, which must not use up the limit or the offset.
    @Test @MainActor func aWindowIsTakenAfterTheFilterInMemory() throws {
        let store = try TestStore(.postgres)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for name in ["a-no", "b-MONK", "c-no", "d-monk", "e-no", "f-Monk", "g-no", "h-mönk"] {
                try update.create(Person.self).name = name
            }
            try update.commit()
        }
        let folded = %"name"%.contains("monk", options: [.caseInsensitive, .diacriticInsensitive])
        #expect(try world.fetchAll(Person.self, folded, orderBy: .ascending("name"), options: .limit(2) | .offset(1)).map(\.name)
                == ["d-monk", "f-Monk"])
        #expect(try world.fetchIDs(Person.self, folded, orderBy: .descending("name"), options: .limit(1)).count == 1)
        #expect(try world.fetchCount(Person.self, folded) == 4)
    }

    /// The operators filtered in memory cannot run where everything runs in SQL.
    @Test @MainActor func aggregatesAndBatchOperationsRefuseWhatIsFilteredInMemory() throws {
        let store = try TestStore(.postgres)
        let world = try MainContext(stack: store.stack)
        let folded = %"name"%.contains("monk", options: .caseInsensitive)
        let aggregate = try #require(throws: QueryError.self) { _ = try world.queryValue(Person.self, .count("name"), folded) }
        #expect(aggregate.code == .unsupported)
        #expect(aggregate.message.contains("name CONTAINS[c]"))
        let batch = try #require(throws: QueryError.self) {
            try world.beginUpdateAndWait { update in _ = try update.batchUpdate(Person.self, folded, set: ["age": .integer(1)]) }
        }
        #expect(batch.code == .unsupported)
        let delete = try #require(throws: QueryError.self) {
            try world.beginUpdateAndWait { update in _ = try update.batchDelete(Person.self, folded) }
        }
        #expect(delete.code == .unsupported)
        // Fetches and counts run them, in memory.
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "MONK"
            try update.commit()
        }
        #expect(try world.fetchCount(Person.self, folded) == 1)
    }
    /// A read by ID, or a fetch that is its query alone, with nothing pending or pinned to keep
    /// in step is one statement in autocommit, without `BEGIN` or `COMMIT`; a read that may
    /// run several statements keeps its transaction, so they share one snapshot
    /// (Docs/Postgres.md, "Why libpq").
    @Test @MainActor func aReadOfOneStatementRunsWithoutATransaction() throws {
        let store = try TestStore(.postgres)
        let (lookup, fetch, acrossKeyPath) = try statementsOfReadsWithNothingToKeepInStep(store)
        #expect(lookup.count == 1 && lookup.first?.hasPrefix("SELECT") == true, "\(lookup)")
        #expect(fetch.count == 1 && fetch.first?.hasPrefix("SELECT") == true, "\(fetch)")
        #expect(acrossKeyPath.first?.hasPrefix("BEGIN") == true && acrossKeyPath.last == "COMMIT", "\(acrossKeyPath)")

        // A main context's public read, which catches up with the commits handed to it, makes
        // no round trip under the store's lock either (no `BEGIN …; SELECT 1`): its query
        // takes the snapshot, checked against the writer's epoch.
        let read = try statementsOfAMainContextRead(store)
        #expect(read.count == 1 && read.first?.hasPrefix("SELECT") == true, "\(read)")
    }

    /// A read of a few rows by their keys — an object by ID, the object a to-one relationship
    /// leads to — runs on the writer's connection while no write holds it (Docs/Postgres.md,
    /// "Connection settings"): a loop of read-modify-writes opens no reader connection at all,
    /// only the writer and the key connection of the first `create`.
    @Test func readsByKeyRunOnTheIdleWriter() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        // Without history: a doorbell's ring sent alone holds the writer for its transaction, and a
        // read meanwhile rightly takes a reader.
        try stack.addPostgresStore(url: schema.url, tracksHistory: false)
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        let id = try context.beginUpdateAndWait { update -> ObjectID in
            let monk = try update.create(Person.self)
            try update.commit()
            return monk.objectID
        }
        let petID = try context.beginUpdateAndWait { update -> ObjectID in
            let pet = try update.create(Pet.self)
            pet.owner = try update.fetch(Person.self, id: id)
            try update.commit()
            return pet.objectID
        }
        for _ in 0..<10 {
            try context.beginUpdateAndWait { update in
                // The pet by its ID, then its owner, whom the to-one relationship reads by key.
                try #require(try update.fetch(Pet.self, id: petID)?.owner).age += 1
                try update.commit()
            }
        }
        let plain = try connectionOutsideTheStack(schema)
        #expect(try plain.scalar("SELECT age FROM \"Person\"") == .integer(10))
        let open = try connectionsOfTheStack(schema, seenFrom: plain)
        #expect(open == .integer(2), "\(open) connections: the writer, the key connection and readers")
    }

    /// Docs/Postgres.md, "Connection settings": up to eight members of a to-many relationship,
    /// once their IDs are read, are read by key on the idle writer. Nine are one statement on a
    /// reader, and the writer sees none of the read.
    @Test(arguments: [8, 9]) func upToEightMembersAreReadOnTheIdleWriter(members: Int) throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addPostgresStore(url: schema.url, tracksHistory: false)  // no doorbell on the writer (above)
        let postgres = try #require(stack.store as? PostgresStore)
        func roundTrips() -> Int { postgres.writer.withLock { $0?.roundTrips ?? 0 } }
        let context = try Context(stack: stack, updateTarget: .persistentStore)
        let id = try context.beginUpdateAndWait { update -> ObjectID in
            let monk = try update.create(Person.self)
            for index in 0..<members {
                let pet = try update.create(Pet.self)
                (pet.name, pet.owner) = ("Pet \(index)", monk)
            }
            try update.commit()
            return monk.objectID
        }
        let reader = try Context(stack: stack, updateTarget: .persistentStore)
        let (names, onTheWriter) = try reader.beginUpdateAndWait { update in
            let monk = try #require(try update.fetch(Person.self, id: id))
            let before = roundTrips()
            let names = monk.pets.map(\.name)
            return (names, roundTrips() - before)
        }
        #expect(names.count == members)
        #expect(members <= 8 ? onTheWriter > 0 : onTheWriter == 0, "\(onTheWriter) round trips on the writer")
    }

    /// A read by keys while a commit is queued for the writer does not take the writer (it
    /// would hold that write up): it runs on a reader, and shows the queued commit, as every
    /// read does. The background writer is held up, so the commit stays queued while the
    /// writer's connection is idle.
    @Test func aReadByKeyWhileACommitIsQueuedTakesAReader() throws {
        let schema = try TestSchema()
        defer { schema.drop() }
        let stack = try Stack(model: Model(Person.self, Pet.self))
        try stack.addPostgresStore(url: schema.url, tracksHistory: false)  // no doorbell on the writer (above)
        let postgres = try #require(stack.store as? PostgresStore)
        let id = try Context(stack: stack, updateTarget: .persistentStore).beginUpdateAndWait { update -> ObjectID in
            let monk = try update.create(Person.self)
            try update.commit()
            return monk.objectID
        }
        postgres.writeQueue.sync {}  // a drain the fixture handed on may still be running
        postgres.writeQueue.suspend()
        var suspended = true
        defer { if suspended { postgres.writeQueue.resume() } }
        try Context(stack: stack, updateTarget: .rootContext(autoMerge: false)).beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: id)).age = 7
            try update.commit()
        }
        let age = try Context(stack: stack).beginUpdateAndWait { update in try update.fetch(Person.self, id: id)?.age }
        #expect(age == 7)
        let plain = try connectionOutsideTheStack(schema)
        #expect(try plain.scalar("SELECT age FROM \"Person\"") == .integer(0), "the commit is not written yet")
        let open = try connectionsOfTheStack(schema, seenFrom: plain)
        #expect(open == .integer(3), "\(open) connections: the writer, the key connection and one reader")
        postgres.writeQueue.resume()
        suspended = false
        try stack.flushAndWait()
        #expect(try plain.scalar("SELECT age FROM \"Person\"") == .integer(7))
    }

    /// Reads by keys on the idle writer, while commits of two kinds are written on other
    /// threads — ones that wait to be written (`.persistentStore`) and ones the background
    /// writer saves, which reads see in the overlay meanwhile — see each commit wholly and
    /// never go back: two pets changed together are always read with the same age, and a
    /// thread's later read never shows an older one.
    @Test(.timeLimit(.minutes(2))) func readsByKeyOnTheWriterSeeEachCommitWholly() throws {
        let store = try TestStore(.postgres)
        let setUp = try Context(stack: store.stack, updateTarget: .persistentStore)
        let owner = try setUp.beginUpdateAndWait { update in try Fixtures.owner(ofPetsNamed: ["Rex", "Tom"], update) }
        let commits = 150
        let done = Locked(false)
        let mismatches = Locked<[String]>([])
        let reads = Locked(0)
        let readers = DispatchGroup()
        for _ in 0..<2 {
            DispatchQueue.global().async(group: readers) {
                do {
                    var last = 0
                    repeat {
                        let reader = try Context(stack: store.stack)
                        let ages = try reader.beginUpdateAndWait { update in
                            try #require(try update.fetch(Person.self, id: owner)).pets.map(\.age)
                        }
                        reads.withLock { $0 += 1 }
                        if Set(ages).count != 1 || ages[0] < last { mismatches.withLock { $0.append("\(ages) after \(last)") } }
                        last = ages[0]
                    } while !done.withLock({ $0 })
                } catch {
                    mismatches.withLock { $0.append("\(error)") }
                }
            }
        }
        // The commits start once both readers are reading (or one failed, which the test reports).
        while reads.withLock({ $0 }) < 2 && mismatches.withLock({ $0.isEmpty }) { usleep(1_000) }
        do {
            defer { done.withLock { $0 = true } }
            let waiting = try Context(stack: store.stack, updateTarget: .persistentStore)
            let background = try Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
            for round in 1...commits {
                try (round.isMultiple(of: 2) ? waiting : background).beginUpdateAndWait { update in
                    for pet in try #require(try update.fetch(Person.self, id: owner)).pets { pet.age = round }
                    try update.commit()
                }
            }
            try store.stack.flushAndWait()
        }
        readers.wait()
        #expect(mismatches.withLock { $0 }.isEmpty, "\(mismatches.withLock { $0.prefix(5) })")
        let reader = try Context(stack: store.stack)
        #expect(try reader.beginUpdateAndWait { update in try #require(try update.fetch(Person.self, id: owner)).pets.map(\.age) } == [commits, commits])
    }

    /// A connection to the test's schema that does not carry its name as `application_name`,
    /// so it is not counted among the stack's (`connectionsOfTheStack`).
    private func connectionOutsideTheStack(_ schema: TestSchema) throws -> PostgresConnection {
        try PostgresConnection(PostgresSettings(url: URL(string: schema.url.absoluteString.replacingOccurrences(of: "&application_name=\(schema.name)", with: ""))!))
    }

    /// How many connections the stack of the test's schema has open, as the server lists them.
    private func connectionsOfTheStack(_ schema: TestSchema, seenFrom plain: PostgresConnection) throws -> Value {
        try plain.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?", [.text(schema.name)])
    }
}
