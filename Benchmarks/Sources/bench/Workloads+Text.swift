import ContextStack
import Foundation
import GRDB

/// The text and upsert workloads' entity: a name with an index (prefix queries), an email
/// that is unique (the upsert's key), an unindexed note (substring queries) and a number.
/// Its own model and files: the `Item` workloads keep the table they always had.
@Entity final class Contact: ManagedObject {
    @Attribute(.indexed) var name: String = ""
    @Attribute(.unique) var email: String = ""
    var note: String = ""
    var visits: Int = 0
}

/// A contact as a plain struct: what raw steps into, and the seed of every write.
struct RawContact: Sendable, Equatable {
    var name: String
    var email: String
    var note: String
    var visits: Int

    /// The `index`-th contact of the data set; `version` 2 is what the upsert writes over it.
    init(index i: Int, version: Int = 1) {
        name = "name-\(i)"
        email = "c\(i)@example.org"
        note = version == 1 ? "note \(i)" : "note \(i) v\(version)"
        visits = i % 100 + version - 1
    }

    init(name: String, email: String, note: String, visits: Int) {
        (self.name, self.email, self.note, self.visits) = (name, email, note, visits)
    }

    static let columns = "\"name\", \"email\", \"note\", \"visits\""

    @inline(__always) init(_ statement: RawStatement) {
        self.init(name: statement.text(0), email: statement.text(1), note: statement.text(2), visits: statement.int(3))
    }
}

/// GRDB's contact record, written as `GItem` is (columns by index, hand-written encoding).
/// `id` is nil for a row it inserts: SQLite picks the key, as it does for raw's.
struct GContact: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "Contact"
    static var databaseSelection: [any SQLSelectable] { [Column("name"), Column("email"), Column("note"), Column("visits")] }

    var name: String
    var email: String
    var note: String
    var visits: Int

    init(_ seed: RawContact) {
        (name, email, note, visits) = (seed.name, seed.email, seed.note, seed.visits)
    }

    init(row: GRDB.Row) throws {
        name = row[0]
        email = row[1]
        note = row[2]
        visits = row[3]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["name"] = name
        container["email"] = email
        container["note"] = note
        container["visits"] = visits
    }

    var plain: RawContact { RawContact(name: name, email: email, note: note, visits: visits) }
}

extension Contact {
    func assign(_ seed: RawContact) {
        name = seed.name
        email = seed.email
        note = seed.note
        visits = seed.visits
    }

    var plain: RawContact { RawContact(name: name, email: email, note: note, visits: visits) }
}

/// The `Contact` table's files: its DDL as ContextStack makes it, filled the same way for
/// every contender (raw inserts, keys 1…count).
@MainActor final class ContactFiles {
    let model: Model
    let ddl: [String]

    init() throws {
        model = try Model(Contact.self)
        ddl = try fixture.schema(of: "Contact", in: model)
    }

    /// A raw/GRDB file holding contacts 0..<count.
    func plainFile(_ label: String, count: Int) throws -> URL {
        let url = fixture.newURL(label)
        let db = try RawDatabase(path: url.path)
        for statement in ddl { try db.execute(statement) }
        try fill(db, count: count)
        return url
    }

    /// A ContextStack store holding contacts 0..<count (written with raw inserts: same rows).
    func storeFile(_ label: String, count: Int) throws -> URL {
        let url = fixture.newURL(label)
        do {
            let stack = try Stack(model: model)
            try stack.addDatabaseStore(at: url)
        }
        try fill(try RawDatabase(path: url.path), count: count)
        return url
    }

    private func fill(_ db: RawDatabase, count: Int) throws {
        let statement = try db.prepare("INSERT INTO \"Contact\" (\"Z_PK\", \(RawContact.columns)) VALUES (?, ?, ?, ?, ?)")
        try db.execute("BEGIN IMMEDIATE")
        for index in 0..<count {
            let seed = RawContact(index: index)
            statement.bind(1, Int64(index + 1))
            statement.bind(2, seed.name)
            statement.bind(3, seed.email)
            statement.bind(4, seed.note)
            statement.bind(5, seed.visits)
            try statement.run()
        }
        try db.execute("COMMIT")
    }

    /// Every contact in the file at `url`, by email.
    static func rows(_ url: URL) throws -> [String: RawContact] {
        let db = try RawDatabase(path: url.path)
        let statement = try db.prepare("SELECT \(RawContact.columns) FROM \"Contact\"")
        var rows: [String: RawContact] = [:]
        while try statement.step() {
            let row = RawContact(statement)
            guard rows.updateValue(row, forKey: row.email) == nil else { throw BenchError("two contacts hold \(row.email)") }
        }
        return rows
    }
}

/// The reading text workloads' files: the contacts, once per contender.
@MainActor class TextWorkload: WorkloadBase {
    var raw: RawDatabase!
    var pool: DatabasePool!
    var stack: Stack!
    var world: MainContext!

    func prepare() async throws {
        let files = try ContactFiles()
        raw = try RawDatabase(path: try files.plainFile("text-raw", count: n).path)
        pool = try fixture.pool(try files.plainFile("text-grdb", count: n))
        stack = try Stack(model: files.model)
        try stack.addDatabaseStore(at: try files.storeFile("text-cs", count: n))
        world = try MainContext(stack: stack)
    }

    func finish() async throws {
        raw = nil; pool = nil; world = nil; stack = nil
    }

    /// Runs `queries` with each contender's idiom (raw's SQL, GRDB's query interface,
    /// ContextStack's condition) and checks every contender read `expected` rows in all.
    func run(_ contender: Contender, raw sql: String, patterns: [String], expected: Int,
             grdb: @escaping @Sendable (String) -> QueryInterfaceRequest<GContact>,
             contextStack: (String) -> Condition) throws -> Sample {
        var total = 0
        let elapsed: Double
        switch contender {
        case .raw:
            let statement = try raw.prepare("SELECT \(RawContact.columns) FROM \"Contact\" WHERE \(sql)")
            elapsed = try measure {
                for pattern in patterns {
                    statement.bind(1, pattern)
                    var rows: [RawContact] = []
                    while try statement.step() { rows.append(RawContact(statement)) }
                    statement.reset()
                    total += rows.count
                }
            }
        case .grdb:
            let pool = pool!
            elapsed = try measure {
                for pattern in patterns {
                    total += try pool.read { db in try grdb(pattern).fetchAll(db) }.count
                }
            }
        case .contextStack:
            world.reset()
            elapsed = try measure {
                for pattern in patterns {
                    total += try world.fetchAll(Contact.self, contextStack(pattern)).count
                }
            }
        }
        try expect(total == expected)
        return Sample(seconds: elapsed)
    }
}

/// text-prefix: names that begin with a prefix, on an indexed column, 1,000 queries of 11 rows.
final class TextPrefixWorkload: TextWorkload, Workload {
    let id = "text-prefix"
    let summary = "beginsWith on an indexed text column (11 rows), 1,000 queries"
    let target = "≤ 1.5 × raw"
    private var prefixes: [String] = []
    private var expected = 0

    override func prepare() async throws {
        try await super.prepare()
        var generator = SplitMix(state: 17)
        let keys = (0..<1000).map { _ in Int.random(in: 1000..<10_000, using: &generator) }
        prefixes = keys.map { "name-\($0)" }
        // The names that begin with "name-k": k, 10k…10k+9, 100k…100k+99 and so on, below n.
        expected = keys.reduce(0) { total, key in
            var count = 0, low = key, width = 1
            while low < n {
                count += min(low + width, n) - low
                low *= 10; width *= 10
            }
            return total + count
        }
    }

    func run(_ contender: Contender) async throws -> Sample? {
        // Raw: the range a careful developer writes for a prefix, which the index serves
        // ("name-k" followed by the character after "9", ":"). GRDB: the same range through
        // its query interface (its `like` would read every row: SQLite's LIKE uses an index
        // only when the column's collation is NOCASE).
        try run(contender, raw: "\"name\" >= ?1 AND \"name\" < ?1 || ':'", patterns: prefixes, expected: expected,
                grdb: { prefix in GContact.filter(Column("name") >= prefix && Column("name") < prefix + ":") },
                contextStack: { prefix in (%"name").beginsWith(prefix) })
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        return Verdict(met: cs <= 1.5 * raw, note: String(format: "%.1f µs per query", cs / Double(prefixes.count) * 1e6))
    }
}

/// text-contains: notes that contain a string, on an unindexed column: 10 queries, each
/// reading every row.
final class TextContainsWorkload: TextWorkload, Workload {
    let id = "text-contains"
    let summary = "contains on an unindexed text column (every row read), 10 queries"
    let target = "≤ 1.5 × raw"
    private let patterns = ["123", "456", "789", "2024", "99", "500", "31", "777", "8", "1000"]
    private var expected = 0

    override func prepare() async throws {
        try await super.prepare()
        expected = patterns.reduce(0) { total, pattern in
            total + (0..<n).count { RawContact(index: $0).note.contains(pattern) }
        }
    }

    func run(_ contender: Contender) async throws -> Sample? {
        // Raw: `instr`, SQLite's exact substring test. GRDB: `like` with `%`, its idiom for a
        // substring (ASCII-case-insensitive, which changes nothing for these digits).
        try run(contender, raw: "instr(\"note\", ?1) > 0", patterns: patterns, expected: expected,
                grdb: { pattern in GContact.filter(Column("note").like("%\(pattern)%")) },
                contextStack: { pattern in (%"note").contains(pattern) })
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        return Verdict(met: cs <= 1.5 * raw, note: String(format: "%.1f ms per query", cs / Double(patterns.count) * 1e3))
    }
}

/// upsert: N contacts keyed on their unique email, half of them already stored (the import
/// of CoreStore #502), in one transaction; the stored half is updated, the other inserted.
/// Every run starts from a fresh file holding contacts 0..<N/2; the contacts come in a
/// shuffled order, the same for everyone. Checked: N rows afterwards, each holding the
/// upserted values.
final class UpsertWorkload: WorkloadBase, Workload {
    let id = "upsert"
    let summary = "N rows keyed on a unique attribute, half already stored, one transaction"
    let target = "≤ 3 × raw"
    private var files: ContactFiles!
    private var contacts: [RawContact] = []

    func prepare() async throws {
        files = try ContactFiles()
        var generator = SplitMix(state: 19)
        contacts = (0..<n).shuffled(using: &generator).map { RawContact(index: $0, version: 2) }
    }

    func run(_ contender: Contender) async throws -> Sample? {
        let contacts = contacts
        let url: URL
        let elapsed: Double
        switch contender {
        case .raw:
            url = try files.plainFile("upsert-raw", count: n / 2)
            let db = try RawDatabase(path: url.path)
            let statement = try db.prepare("""
                INSERT INTO "Contact" (\(RawContact.columns)) VALUES (?, ?, ?, ?)
                ON CONFLICT ("email") DO UPDATE SET "name" = excluded."name", "note" = excluded."note", "visits" = excluded."visits"
                """)
            elapsed = try measure {
                try db.execute("BEGIN IMMEDIATE")
                for contact in contacts {
                    statement.bind(1, contact.name)
                    statement.bind(2, contact.email)
                    statement.bind(3, contact.note)
                    statement.bind(4, contact.visits)
                    try statement.run()
                }
                try db.execute("COMMIT")
            }
        case .grdb:
            url = try files.plainFile("upsert-grdb", count: n / 2)
            let pool = try fixture.pool(url)
            elapsed = try measure {
                try pool.write { db in
                    for contact in contacts { try GContact(contact).upsert(db) }
                }
            }
        case .contextStack:
            url = try files.storeFile("upsert-cs", count: n / 2)
            let stack = try Stack(model: files.model)
            try stack.addDatabaseStore(at: url)
            let world = try MainContext(stack: stack)
            let start = now()
            try world.beginUpdateAndWait { update in
                for contact in contacts {
                    try update.fetchOrCreate(Contact.self, %"email" == contact.email).assign(contact)
                }
                try update.commit()
            }
            try await stack.flush()
            elapsed = seconds(since: start)
            // The change set reached the main context: it shows the upserted values.
            let shown = try world.fetchAll(Contact.self, %"email" == contacts[0].email)
            try expect(shown.map(\.plain) == [contacts[0]])
        }
        let rows = try ContactFiles.rows(url)
        guard rows.count == n else { throw BenchError("upsert, \(contender.label): \(rows.count) rows, expected \(n)") }
        for contact in contacts where rows[contact.email] != contact {
            throw BenchError("upsert, \(contender.label): \(contact.email) holds \(String(describing: rows[contact.email])), expected \(contact)")
        }
        fixture.remove(url)
        return Sample(seconds: elapsed)
    }

    func verdict(_ result: WorkloadResult) -> Verdict {
        guard let raw = result.median(.raw), let cs = result.median(.contextStack) else { return Verdict(met: nil, note: "missing samples") }
        return Verdict(met: cs <= 3 * raw, note: String(format: "%.1f µs per row (raw %.1f)", cs / Double(n) * 1e6, raw / Double(n) * 1e6))
    }
}
