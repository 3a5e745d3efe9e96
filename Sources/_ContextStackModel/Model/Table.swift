import _ContextStackCore

/// The SQLite table of one entity hierarchy: the root entity's name, a `Z_PK` primary key, a
/// `Z_ENT` column when the hierarchy has sub-entities, and one column per attribute and to-one
/// relationship of every entity in the hierarchy.
package final class Table: Sendable {
    package struct Column: Sendable {
        package let name: String
        package let type: String
        package let isIndexed: Bool
        /// For a to-one relationship: the table it points into.
        package var references: String? = nil
    }

    package let name: String
    package let columns: [Column]
    package let hasEntityColumn: Bool
    /// How many entities share the table.
    let familyCount: Int
    /// `t0."Z_PK", [t0."Z_ENT",] t0."a", …`: every column, made once, because reads by key
    /// need it on every call.
    let wholeRowSelectList: String
    /// `FROM "T" AS t0`, made once: the `FROM` of every query that joins no other table.
    let fromT0: String
    /// `SELECT <wholeRowSelectList> FROM "T" AS t0`, made once: reads by key start with it.
    let selectWholeRowsFrom: String
    /// The whole row of one key: `<selectWholeRowsFrom> WHERE t0."Z_PK" = ?`, made once,
    /// because every read of one object by its ID runs it.
    let selectByKeySQL: String
    /// The table's name as an SQL identifier, made once.
    package let quotedName: String
    /// The unique indexes on the table; written once in `Model.init`, before it is shared.
    package nonisolated(unsafe) var uniqueConstraints: [UniqueConstraint] = []

    init(name: String, columns: [Column], familyCount: Int) {
        self.name = name
        self.columns = columns
        self.hasEntityColumn = familyCount > 1
        self.familyCount = familyCount
        var list = ["t0.\"Z_PK\""]
        if familyCount > 1 { list.append("t0.\"Z_ENT\"") }
        list += columns.map { "t0.\($0.name.quotedIdentifier)" }
        wholeRowSelectList = list.joined(separator: ", ")
        quotedName = name.quotedIdentifier
        fromT0 = "FROM \(quotedName) AS t0"
        selectWholeRowsFrom = "SELECT \(wholeRowSelectList) \(fromT0)"
        selectByKeySQL = "\(selectWholeRowsFrom) WHERE t0.\"Z_PK\" = ?"
    }
}

/// The table of a many-to-many relationship (or a to-many one without inverse): one row per
/// related pair, `source` on the side that owns the table.
package final class JoinTable: Sendable {
    package let name: String
    init(name: String) { self.name = name }
    package var quotedName: String { name.quotedIdentifier }
}
