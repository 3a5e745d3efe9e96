import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import Foundation
import Testing

/// The PostgreSQL store's tables and keys: the same storage classes, byte order for text,
/// unique indexes and a row version, and keys that no two connections ever share.
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresSchemaTests {
    let tables: PostgresTables
    var database: TestDatabase { tables.database }
    var connection: PostgresConnection { tables.connection }
    var schema: StoreSchema { tables.schema }

    init() throws { tables = try PostgresTables([Person.self, Pet.self, Article.self, Tag.self, Sample.self, Staff.self, Engineer.self, Manager.self, Team.self]) }

    /// `information_schema.columns` of one table: name → (type, collation).
    func columns(of table: String) throws -> [String: (type: String, collation: String?)] {
        var result: [String: (String, String?)] = [:]
        try connection.query("SELECT column_name, data_type, collation_name FROM information_schema.columns WHERE table_name = ?", [.text(table)]) { row in
            result[row.value(0).stringValue!] = (row.value(1).stringValue!, row.value(2).stringValue)
        }
        return result
    }

    @Test func columnsHoldWhatSQLiteColumnsHold() throws {
        let sample = try columns(of: "Sample")
        #expect(sample["Z_PK"]?.type == "bigint")
        #expect(sample["Z_VERSION"]?.type == "bigint")
        #expect(sample["flag"]?.type == "bigint", "booleans are 1 and 0, as on SQLite")
        #expect(sample["int16"]?.type == "bigint")
        #expect(sample["double"]?.type == "double precision")
        #expect(sample["date"]?.type == "double precision")
        #expect(sample["string"]?.type == "text")
        #expect(sample["string"]?.collation == "C")
        #expect(sample["decimal"]?.collation == "C")
        #expect(sample["data"]?.type == "bytea")
        #expect(sample["uuid"]?.type == "bytea")
        let staff = try columns(of: "Staff")
        #expect(staff["Z_ENT"]?.type == "bigint", "a table shared by sub-entities says which entity each row is")
        #expect(try columns(of: "Person")["Z_ENT"] == nil)
    }

    @Test func theDescriptionAndHashAreKept() throws {
        var stored: [String: String] = [:]
        try connection.query("SELECT key, value FROM \"Z_METADATA\"") { stored[$0.value(0).stringValue!] = $0.value(1).stringValue }
        #expect(stored["hash"] == schema.hash)
        #expect(stored["schema"] == schema.description)
        #expect(stored["models"] == schema.hash, "the history of the models it had starts with this one")
        // Writing it again replaces it rather than failing on the key.
        try connection.execute(schema.postgresMetadataStatement)
        var count = Value.null
        try connection.query("SELECT count(*) FROM \"Z_METADATA\"") { count = $0.value(0) }
        #expect(count == .integer(4))
    }

    @Test func textOrdersByBytesAsOnSQLite() throws {
        let names = ["é", "a", "B", "Z", "ä", "b", ""]
        for (index, name) in names.enumerated() {
            try connection.run("INSERT INTO \"Person\" (\"Z_PK\", name, age) VALUES (?, ?, 0)", [.integer(Int64(index + 1)), .text(name)])
        }
        var ordered: [String] = []
        try connection.query("SELECT name FROM \"Person\" ORDER BY name") { ordered.append($0.value(0).stringValue!) }
        #expect(ordered == names.sorted { Value.compare(.text($0), .text($1)) < 0 })
        #expect(ordered == ["", "B", "Z", "a", "b", "ä", "é"])
        var below = Value.null
        try connection.query("SELECT count(*) FROM \"Person\" WHERE name < ?", [.text("a")]) { below = $0.value(0) }
        #expect(below == .integer(3), "'', 'B' and 'Z' sort before 'a' by bytes")
    }

    @Test func uniqueAttributesHaveAUniqueIndexThatAllowsManyNulls() throws {
        try connection.run("INSERT INTO \"Person\" (\"Z_PK\", name, age, email) VALUES (1, 'Monk', 1, 'monk@example.org'), (2, 'A', 1, NULL), (3, 'B', 1, NULL)")
        let error = try #require(throws: PostgresError.self) {
            try connection.run("INSERT INTO \"Person\" (\"Z_PK\", name, age, email) VALUES (4, 'Copy', 1, ?)", [.text("monk@example.org")])
        }
        #expect(error.code == .uniqueViolation)
        #expect(error.constraint == schema.tables.first { $0.name == "Person" }?.uniqueConstraints.first?.indexName)
    }

    @Test func everyIndexOfTheModelExists() throws {
        var existing: Set<String> = []
        try connection.query("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'") { existing.insert($0.value(0).stringValue!) }
        #expect(!schema.indexes.isEmpty)
        for index in schema.indexes { #expect(existing.contains(index.name), "missing \(index.name)") }
        #expect(schema.postgresIdentifiersTooLong.isEmpty)
    }

    /// Docs/Postgres.md, "What the store creates": keys are reserved in blocks that double
    /// from 32 up to 8,192 as a table's inserts go on. The sequence moves by a block at each
    /// reservation: 32, then 64, … 8,192 (16,352 keys in all), then 8,192 at a time.
    @Test func keyBlocksDoubleUpToEightThousandOneHundredNinetyTwo() throws {
        let person = try #require(schema.tables.first { $0.name == "Person" })
        let keys = PostgresKeys()
        let sequence = "SELECT last_value FROM \(StoreSchema.sequenceName(of: person).quotedIdentifier)"
        var reserved = 0
        /// The sequence's last value once `count` keys are reserved in all.
        func lastValue(after count: Int) throws -> Int64? {
            while reserved < count {
                _ = try keys.reserveKey(for: person) { connection }
                reserved += 1
            }
            return try connection.scalar(sequence).int64Value
        }
        #expect(try lastValue(after: 1) == 32)
        #expect(try lastValue(after: 33) == 32 + 64)
        #expect(try lastValue(after: 16_352) == 16_352, "32 + 64 + … + 8,192")
        #expect(try lastValue(after: 16_353) == 16_352 + 8_192)
        #expect(try lastValue(after: 24_545) == 16_352 + 2 * 8_192, "and 8,192 at a time from then on")
    }

    @Test func keysFromManyConnectionsNeverCollide() async throws {
        let person = try #require(schema.tables.first { $0.name == "Person" })
        let url = database.url
        // Four "processes": a connection and a key reserver each, reserving at once.
        let results = Locked<[[Int64]]>([])
        let errors = Locked<[any Error]>([])
        await onThreads(4) { _ in
            do {
                let connection = try PostgresConnection(PostgresSettings(url: url))
                let keys = PostgresKeys()
                var mine: [Int64] = []
                for _ in 0..<3000 { mine.append(try keys.reserveKey(for: person) { connection }) }
                results.withLock { $0.append(mine) }
            } catch {
                errors.withLock { $0.append(error) }
            }
        }
        #expect(errors.withLock { $0.isEmpty }, "\(errors.withLock { $0 })")
        let all = results.withLock { $0.flatMap { $0 } }
        #expect(all.count == 12000)
        #expect(Set(all).count == all.count, "a key was handed out twice")
        #expect(all.allSatisfy { $0 > 0 })
        for list in results.withLock({ $0 }) { #expect(list == list.sorted(), "one reserver's keys grow") }
    }
}

/// An entity with a property name longer than PostgreSQL keeps (63 bytes).
@Entity final class LongNamed: ManagedObject {
    var aPropertyWhoseNameIsLongerThanTheSixtyThreeBytesPostgreSQLKeepsOnly: Int = 0
}

/// An entity whose property name is exactly as long as PostgreSQL keeps (63 bytes).
@Entity final class EdgeNamed: ManagedObject {
    var aPropertyNameOfExactlySixtyThreeBytesThatPostgreSQLKeepsWholexx: Int = 0
}

/// Opening a PostgreSQL store installs its schema once, however many servers open it at once,
/// and never changes a database that another model or another program wrote.
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresSchemaInstallerTests {
    let database: TestDatabase

    init() throws { database = try TestDatabase() }

    func connect() throws -> PostgresConnection { try PostgresConnection(PostgresSettings(url: database.url)) }

    static func schema(_ types: ManagedObject.Type...) throws -> StoreSchema {
        StoreSchema(graph: try Model(types).graph, configuration: nil)
    }

    func tableNames() throws -> Set<String> {
        var names: Set<String> = []
        try connect().query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'") { names.insert($0.value(0).stringValue!) }
        return names
    }

    /// Also where the database's default isolation is `REPEATABLE READ`: a server that waited
    /// for the advisory lock must see the tables the first one made (with a plain `BEGIN`, its
    /// snapshot, taken before the wait, did not, and its `CREATE TABLE` failed).
    @Test(arguments: [false, true]) func serversOpeningAtOnceInstallOnce(repeatableReadByDefault: Bool) async throws {
        let schema = try Self.schema(Person.self, Pet.self)
        let url = repeatableReadByDefault ? database.url.addingServerOption("-cdefault_transaction_isolation=repeatable\\ read") : database.url
        let outcomes = Locked<[PostgresSchemaInstaller.Outcome]>([])
        let errors = Locked<[String]>([])
        await onThreads(6) { _ in
            do {
                let connection = try PostgresConnection(PostgresSettings(url: url))
                let outcome = try PostgresSchemaInstaller.install(schema, on: connection, autoMigrating: true)
                outcomes.withLock { $0.append(outcome) }
            } catch {
                errors.withLock { $0.append("\(error)") }
            }
        }
        #expect(errors.withLock { $0 }.isEmpty, "\(errors.withLock { $0 })")
        #expect(outcomes.withLock { $0.filter { $0 == .created }.count } == 1)
        #expect(outcomes.withLock { $0.filter { $0 == .unchanged }.count } == 5)
        #expect(try tableNames() == ["Z_METADATA", "Person", "Pet"])
        #expect(try PostgresSchemaInstaller.install(schema, on: connect(), autoMigrating: false) == .unchanged)
    }

    /// Without `autoMigrating`, another model's database is refused and left as it was (what
    /// migrating does is PostgresMigrationTests' business).
    @Test func anotherModelsDatabaseIsLeftAsItWas() throws {
        let written = try Self.schema(Person.self, Pet.self)
        _ = try PostgresSchemaInstaller.install(written, on: connect(), autoMigrating: true)
        try connect().run("INSERT INTO \"Pet\" (\"Z_PK\", name, age) VALUES (1, 'Rex', 3)")
        let other = try Self.schema(Person.self, Pet.self, Article.self, Tag.self)
        let strict = try #require(throws: StoreError.self) {
            try PostgresSchemaInstaller.install(other, on: connect(), autoMigrating: false)
        }
        #expect(strict.code == .modelMismatch)
        #expect(strict.message.contains("autoMigrating: true"))
        #expect(try tableNames() == ["Z_METADATA", "Person", "Pet"])
        #expect(try connect().scalar("SELECT value FROM \"Z_METADATA\" WHERE key = 'hash'") == .text(written.hash))
        #expect(try connect().scalar("SELECT name FROM \"Pet\"") == .text("Rex"))
    }

    @Test func tablesContextStackDidNotCreateAreNeverTouched() throws {
        try connect().execute("CREATE TABLE \"Pet\" (id serial PRIMARY KEY, species text); INSERT INTO \"Pet\" (species) VALUES ('cat')")
        let error = try #require(throws: StoreError.self) {
            try PostgresSchemaInstaller.install(Self.schema(Person.self, Pet.self), on: connect(), autoMigrating: true)
        }
        #expect(error.code == .foreignDatabase)
        #expect(error.message.contains("Pet"))
        #expect(try tableNames() == ["Pet"], "nothing was created beside it")
        #expect(try connect().scalar("SELECT species FROM \"Pet\"") == .text("cat"))
    }

    /// Not tables alone: a view, a sequence or an index of a name the store would create, a
    /// history table in a database without ContextStack's metadata, and a `Z_METADATA` of
    /// another program are someone else's too. Before, the store adopted such a `Z_HISTORY`
    /// (and wrote its rows into it at every commit), and the others failed with the server's
    /// "already exists" or "column does not exist" instead of `.foreignDatabase`. A key-value
    /// table named `Z_METADATA` is someone else's unless it has ContextStack's `format` and a
    /// hash (it was adopted, and the store's rows written into it).
    @Test(arguments: ["a view", "a sequence", "an index", "a history table", "a metadata table", "a metadata view",
                      "a key-value metadata table", "an empty key-value metadata table", "a metadata table with integer keys"])
    func otherRelationsOfTheStoresNamesAreNeverTouched(kind: String) throws {
        let schema = try Self.schema(Person.self, Pet.self)
        let index = try #require(schema.indexes.first?.name)
        let statement = switch kind {
        case "a view": "CREATE VIEW \"Person\" AS SELECT 1 AS one"
        case "a sequence": "CREATE SEQUENCE \"Z_KEYS_Pet\""
        case "an index": "CREATE TABLE other (x int); CREATE INDEX \(index.quotedIdentifier) ON other (x)"
        case "a history table": "CREATE TABLE \"Z_HISTORY\" (id int)"
        case "a metadata view": "CREATE VIEW \"Z_METADATA\" AS SELECT 1 AS one"
        case "a metadata table": "CREATE TABLE \"Z_METADATA\" (name text, data text)"
        case "a key-value metadata table": "CREATE TABLE \"Z_METADATA\" (key text PRIMARY KEY, value text); INSERT INTO \"Z_METADATA\" VALUES ('theme', 'dark'), ('hash', 'x')"
        case "an empty key-value metadata table": "CREATE TABLE \"Z_METADATA\" (key text PRIMARY KEY, value text)"
        case "a metadata table with integer keys": "CREATE TABLE \"Z_METADATA\" (key int, value text); INSERT INTO \"Z_METADATA\" VALUES (1, 'one')"
        default: ""
        }
        try #require(!statement.isEmpty, "no statement for \(kind)")
        try connect().execute(statement)
        let relations = "SELECT string_agg(relname, ' ' ORDER BY relname) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        let before = try connect().scalar(relations)
        let error = try #require(throws: StoreError.self) {
            try PostgresSchemaInstaller.install(schema, on: connect(), autoMigrating: true)
        }
        #expect(error.code == .foreignDatabase, "\(error)")
        #expect(try connect().scalar(relations) == before, "nothing was created beside it")
    }

    /// A `Z_METADATA` with keys this version does not write — a later version's — is still
    /// ContextStack's: the store opens as it was.
    @Test func metadataKeysOfALaterVersionDoNotMakeTheDatabaseForeign() throws {
        let schema = try Self.schema(Person.self, Pet.self)
        #expect(try PostgresSchemaInstaller.install(schema, on: connect(), autoMigrating: true) == .created)
        try connect().execute("INSERT INTO \"Z_METADATA\" (key, value) VALUES ('laterVersion', 'x')")
        #expect(try PostgresSchemaInstaller.install(schema, on: connect(), autoMigrating: true) == .unchanged)
    }

    /// History needs PostgreSQL 13's `pg_current_xact_id()`: an older server is refused when the
    /// store opens, naming the version, rather than at the first commit with "function does not
    /// exist".
    @Test func aServerOlderThan13IsRefusedNamingItsVersion() throws {
        let error = try #require(throws: StoreError.self) {
            try PostgresStore.checkServerVersion(120_016, oldest: PostgresSettings(url: database.url).oldestServerVersion, server: "postgres://app@db/app")
        }
        #expect(error.code == .cannotOpen)
        #expect(error.message.contains("version 12 (120016)") && error.message.contains("PostgreSQL 13 or later"))
        // Opening a store checks first: asked for a version newer than this server's, it is
        // refused, and nothing is created; asked for this server's, it opens.
        var settings = PostgresSettings(url: database.url)
        let version = try connect().serverVersion
        let graph = try Model(Person.self, Pet.self).graph
        func open() throws {
            _ = try PostgresStore(graph: graph, schema: StoreSchema(graph: graph, configuration: nil), settings: settings,
                                  autoMigrating: true, writesInBackground: true, reportError: { _ in })
        }
        settings.oldestServerVersion = version + 1
        let refused = try #require(throws: StoreError.self) { try open() }
        #expect(refused.code == .cannotOpen, "\(refused)")
        #expect(try tableNames().isEmpty)
        settings.oldestServerVersion = version
        try open()
        #expect(try tableNames().contains("Person"))
    }

    /// A schema whose name is not a plain lowercase identifier (`Tenant-1`): the check for
    /// relations of the store's names looks in it by name. (Read as an identifier, `Tenant`
    /// was `tenant`, and `tenant-1` a syntax error.)
    @Test func aSchemaWithAnUnusualNameIsCheckedByName() throws {
        let admin = try connect()
        try admin.execute("CREATE SCHEMA \"Tenant-1\"")
        let connection = try connect()
        try connection.execute("SET search_path = \"Tenant-1\"")
        #expect(try PostgresSchemaInstaller.install(Self.schema(Person.self, Pet.self), on: connection, autoMigrating: true) == .created)
        try admin.execute("CREATE SCHEMA \"Tenant-2\"; CREATE VIEW \"Tenant-2\".\"Pet\" AS SELECT 1 AS one")
        try connection.execute("SET search_path = \"Tenant-2\"")
        let error = try #require(throws: StoreError.self) {
            try PostgresSchemaInstaller.install(Self.schema(Person.self, Pet.self), on: connection, autoMigrating: true)
        }
        #expect(error.code == .foreignDatabase, "\(error)")
    }

    @Test func namesPostgreSQLWouldShortenAreRefusedBeforeAnythingIsCreated() throws {
        let error = try #require(throws: StoreError.self) {
            try PostgresSchemaInstaller.install(Self.schema(LongNamed.self), on: connect(), autoMigrating: true)
        }
        #expect(error.code == .cannotOpen)
        #expect(error.message.contains("aPropertyWhoseNameIsLongerThanTheSixtyThreeBytesPostgreSQLKeepsOnly"))
        #expect(try tableNames().isEmpty)
        // 63 bytes, the most PostgreSQL keeps, is a name like any other.
        #expect(try PostgresSchemaInstaller.install(Self.schema(EdgeNamed.self), on: connect(), autoMigrating: true) == .created)
        #expect(try connect().scalar("SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND column_name = 'aPropertyNameOfExactlySixtyThreeBytesThatPostgreSQLKeepsWholexx'") == .integer(1))
    }

    @Test func messagesNameTheServerWithoutItsPassword() throws {
        var parts = URLComponents(url: database.url, resolvingAgainstBaseURL: false)!
        parts.password = "hunter2"  // trust authentication ignores it
        let connection = try PostgresConnection(PostgresSettings(url: parts.url!))
        _ = try PostgresSchemaInstaller.install(Self.schema(Article.self, Tag.self), on: connection, autoMigrating: true)
        let error = try #require(throws: StoreError.self) {
            try PostgresSchemaInstaller.install(Self.schema(Citizen.self, Passport.self), on: connection, autoMigrating: false)
        }
        #expect(error.message.contains("127.0.0.1"))
        #expect(!error.description.contains("hunter2"))
        #expect(!connection.isInTransaction, "the failed install rolled back")
    }
}
