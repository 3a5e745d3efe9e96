import _ContextStackCore
import _ContextStackSQLite
/// The SQLite table of one entity hierarchy: the root entity's name, a `Z_PK` primary key, a
/// `Z_ENT` column when the hierarchy has sub-entities, and one column per attribute and to-one
/// relationship of every entity in the hierarchy.
final class Table: Sendable {
    struct Column: Sendable {
        let name: String
        let type: String
        let isIndexed: Bool
        /// For a to-one relationship: the table it points into.
        var references: String? = nil
    }

    let name: String
    let columns: [Column]
    let hasEntityColumn: Bool
    /// How many entities share the table.
    let familyCount: Int
    /// `t0."Z_PK", [t0."Z_ENT",] t0."a", …`: every column, made once, because reads by key
    /// need it on every call.
    let wholeRowSelectList: String
    /// The unique indexes on the table; written once in `Model.init`, before it is shared.
    nonisolated(unsafe) var uniqueConstraints: [UniqueConstraint] = []

    init(name: String, columns: [Column], familyCount: Int) {
        self.name = name
        self.columns = columns
        self.hasEntityColumn = familyCount > 1
        self.familyCount = familyCount
        var list = ["t0.\"Z_PK\""]
        if familyCount > 1 { list.append("t0.\"Z_ENT\"") }
        list += columns.map { "t0.\($0.name.quotedIdentifier)" }
        wholeRowSelectList = list.joined(separator: ", ")
    }

    var quotedName: String { name.quotedIdentifier }
}

/// The table of a many-to-many relationship (or a to-many one without inverse): one row per
/// related pair, `source` on the side that owns the table.
final class JoinTable: Sendable {
    let name: String
    init(name: String) { self.name = name }
    var quotedName: String { name.quotedIdentifier }
}
