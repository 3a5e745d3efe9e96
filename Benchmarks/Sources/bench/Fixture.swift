import ContextStack
import Foundation
import GRDB

/// The one schema every contender uses: a primary key and nine attributes — integers,
/// doubles, text and an optional text — ten columns in all. ContextStack creates the table
/// (`Item`, primary key `Z_PK`); the raw and GRDB files get the very same DDL, read back from
/// a ContextStack store.
@Entity final class Item: ManagedObject {
    @Attribute(.indexed) var category: Int = 0
    var quantity: Int = 0
    var rank: Int = 0
    var price: Double = 0
    var score: Double = 0
    var weight: Double = 0
    var name: String = ""
    var code: String = ""
    var note: String?
}

/// A row as a plain struct: what the raw contender steps into, and the seed of every insert.
struct RawItem: Sendable {
    var id: Int64
    var category: Int
    var quantity: Int
    var rank: Int
    var price: Double
    var score: Double
    var weight: Double
    var name: String
    var code: String
    var note: String?

    /// The `index`-th row of the data set (primary key `index + 1`); the same for everyone.
    init(index i: Int) {
        id = Int64(i + 1)
        category = i % 500
        quantity = (i &* 7) % 1000
        rank = i
        price = Double(i % 997) * 0.5
        score = Double((i &* 7919) % 100_003) / 100
        weight = Double(i) / 3
        name = "item-\(i)"
        code = "C\(i % 5000)"
        note = i % 3 == 0 ? nil : "note \(i)"
    }

    init(id: Int64, category: Int, quantity: Int, rank: Int, price: Double, score: Double, weight: Double,
         name: String, code: String, note: String?) {
        self.id = id; self.category = category; self.quantity = quantity; self.rank = rank
        self.price = price; self.score = score; self.weight = weight
        self.name = name; self.code = code; self.note = note
    }
}

/// The GRDB contender's record, written the fastest way GRDB's documentation recommends: a
/// struct with hand-written decoding that reads columns by index (its "Row" performance
/// advice; by name costs a lookup per column), with `databaseSelection` fixing which columns
/// come back in which order, and hand-written encoding instead of the Codable defaults. GRDB
/// caches the statements its query interface builds, so fetches and writes reuse prepared
/// statements as the raw contender's do.
struct GItem: FetchableRecord, PersistableRecord, Sendable {
    static let databaseTableName = "Item"
    static var databaseSelection: [any SQLSelectable] {
        [Column("Z_PK"), Column("category"), Column("quantity"), Column("rank"), Column("price"),
         Column("score"), Column("weight"), Column("name"), Column("code"), Column("note")]
    }

    enum Columns {
        static let id = Column("Z_PK")
        static let category = Column("category")
        static let quantity = Column("quantity")
        static let score = Column("score")
        static let price = Column("price")
    }

    var id: Int64
    var category: Int
    var quantity: Int
    var rank: Int
    var price: Double
    var score: Double
    var weight: Double
    var name: String
    var code: String
    var note: String?

    init(_ seed: RawItem) {
        id = seed.id; category = seed.category; quantity = seed.quantity; rank = seed.rank
        price = seed.price; score = seed.score; weight = seed.weight
        name = seed.name; code = seed.code; note = seed.note
    }

    /// Columns by index, in `databaseSelection`'s order.
    init(row: GRDB.Row) throws {
        id = row[0]
        category = row[1]
        quantity = row[2]
        rank = row[3]
        price = row[4]
        score = row[5]
        weight = row[6]
        name = row[7]
        code = row[8]
        note = row[9]
    }

    func encode(to container: inout PersistenceContainer) throws {
        container["Z_PK"] = id
        container["category"] = category
        container["quantity"] = quantity
        container["rank"] = rank
        container["price"] = price
        container["score"] = score
        container["weight"] = weight
        container["name"] = name
        container["code"] = code
        container["note"] = note
    }
}

/// Files, schema and data shared by the workloads.
@MainActor final class Fixture {
    let n: Int
    let directory: URL
    let seeds: [RawItem]
    /// CREATE TABLE and CREATE INDEX statements of the `Item` table, as ContextStack makes them.
    private(set) var ddl: [String] = []
    private var counter = 0

    let model: Model

    init(n: Int) throws {
        self.n = n
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("contextstack-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        seeds = (0..<n).map(RawItem.init(index:))
        model = try Model(Item.self)
        ddl = try schema(of: "Item", in: model)
    }

    /// The CREATE TABLE and CREATE INDEX statements of `table`, read back from a store
    /// ContextStack made for `model`.
    func schema(of table: String, in model: Model) throws -> [String] {
        let url = newURL("schema")
        do {
            let stack = try Stack(model: model)
            try stack.addDatabaseStore(at: url)
        }
        let db = try RawDatabase(path: url.path)
        let statement = try db.prepare("SELECT sql FROM sqlite_master WHERE tbl_name = '\(table)' AND sql IS NOT NULL ORDER BY type DESC")
        var ddl: [String] = []
        while try statement.step() { ddl.append(statement.text(0)) }
        return ddl
    }

    func removeAll() {
        try? FileManager.default.removeItem(at: directory)
    }

    /// A fresh file name in the benchmark's directory.
    func newURL(_ label: String) -> URL {
        counter += 1
        return directory.appendingPathComponent("\(label)-\(counter).sqlite")
    }

    /// Deletes a database file and its WAL companions.
    func remove(_ url: URL) {
        for suffix in ["", "-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: url.path + suffix)
        }
    }

    /// An empty raw/GRDB file with the `Item` table.
    func emptyPlainFile(_ label: String) throws -> URL {
        let url = newURL(label)
        let db = try RawDatabase(path: url.path)
        for statement in ddl { try db.execute(statement) }
        return url
    }

    /// Writes `count` seed rows into the `Item` table of the file at `url` (raw, one transaction).
    func fill(_ url: URL, count: Int? = nil) throws {
        let db = try RawDatabase(path: url.path)
        try Raw.insert(db, seeds: seeds, count: count ?? n)
    }

    /// A raw/GRDB file holding the data set.
    func filledPlainFile(_ label: String, count: Int? = nil) throws -> URL {
        let url = try emptyPlainFile(label)
        try fill(url, count: count)
        return url
    }

    /// A ContextStack store file holding the data set (written with raw inserts: same rows).
    func filledStoreFile(_ label: String, count: Int? = nil) throws -> URL {
        let url = newURL(label)
        do {
            let stack = try Stack(model: model)
            try stack.addDatabaseStore(at: url)
        }
        try fill(url, count: count)
        return url
    }

    /// A GRDB pool in WAL mode with synchronous=NORMAL, the configuration every contender uses.
    func pool(_ url: URL) throws -> DatabasePool {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        return try DatabasePool(path: url.path, configuration: configuration)
    }
}

/// Raw routines shared by fixtures and workloads.
enum Raw {
    static let columns = "\"Z_PK\", \"category\", \"quantity\", \"rank\", \"price\", \"score\", \"weight\", \"name\", \"code\", \"note\""

    static func insert(_ db: RawDatabase, seeds: [RawItem], count: Int) throws {
        let statement = try db.prepare("INSERT INTO \"Item\" (\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        try db.execute("BEGIN IMMEDIATE")
        for index in 0..<count {
            let seed = seeds[index % seeds.count]
            statement.bind(1, Int64(index + 1))
            statement.bind(2, seed.category)
            statement.bind(3, seed.quantity)
            statement.bind(4, index)
            statement.bind(5, seed.price)
            statement.bind(6, seed.score)
            statement.bind(7, seed.weight)
            statement.bind(8, seed.name)
            statement.bind(9, seed.code)
            statement.bind(10, seed.note)
            try statement.run()
        }
        try db.execute("COMMIT")
    }

    /// Reads the current row of a statement selecting `columns` into a struct.
    @inline(__always) static func item(_ statement: RawStatement) -> RawItem {
        RawItem(id: statement.int64(0), category: statement.int(1), quantity: statement.int(2), rank: statement.int(3),
                price: statement.double(4), score: statement.double(5), weight: statement.double(6),
                name: statement.text(7), code: statement.text(8), note: statement.optionalText(9))
    }
}

extension Item {
    /// Sets every attribute from a seed.
    func assign(_ seed: RawItem) {
        category = seed.category
        quantity = seed.quantity
        rank = seed.rank
        price = seed.price
        score = seed.score
        weight = seed.weight
        name = seed.name
        code = seed.code
        note = seed.note
    }
}

/// A deterministic generator (SplitMix64), so every run looks up the same keys.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
