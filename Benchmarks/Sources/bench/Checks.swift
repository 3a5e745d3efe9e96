import BenchPQ
import Foundation

/// What a write workload left in a contender's `Item` table, read back after its timed run in
/// the same way for every contender: a contender that did less work than the others (a row
/// missing, an update skipped, a value written wrong) fails the run instead of winning it.
///
/// Rows are matched by name (`item-i` is seed `i`), so the check does not depend on the
/// primary keys a contender hands out; every other column is compared exactly.
enum WrittenItems {
    /// Throws unless `rows` hold the data set with the score of every seed that `changed`
    /// selects (by index) raised `runs` times, and every other row as seeded. Every contender
    /// adds 1 per read-modify-write: the same additions in the same order, so the same `Double`.
    static func checkRaised(_ rows: [RawItem], seeds: [RawItem], runs: Int, _ label: String, changed: (Int) -> Bool) throws {
        try check(rows, count: seeds.count, label) { index in
            var item = seeds[index]
            if changed(index) { for _ in 0..<runs { item.score += 1 } }
            return item
        }
    }

    /// The seeds stored at primary keys `keys`: seed `i` is at key `i + 1` in every filled table.
    static func seedIndexes(_ keys: [Int64]) -> Set<Int> {
        Set(keys.map { Int($0) - 1 })
    }

    /// Throws unless `rows` hold exactly `count` items, `item-0` to `item-(count - 1)`, each
    /// equal to `expected(index)` in every column but the primary key.
    static func check(_ rows: [RawItem], count: Int, _ label: String, expected: (Int) -> RawItem) throws {
        guard rows.count == count else { throw BenchError("\(label): \(rows.count) rows, expected \(count)") }
        var seen = [Bool](repeating: false, count: count)
        for row in rows {
            guard row.name.hasPrefix("item-"), let index = Int(row.name.dropFirst(5)), index >= 0, index < count, !seen[index] else {
                throw BenchError("\(label): unexpected or repeated row named \(row.name)")
            }
            seen[index] = true
            let want = expected(index)
            guard row.category == want.category, row.quantity == want.quantity, row.rank == want.rank,
                  row.price == want.price, row.score == want.score, row.weight == want.weight,
                  row.code == want.code, row.note == want.note else {
                throw BenchError("\(label): \(row.name) holds \(row), expected \(want)")
            }
        }
    }

    /// Every row of the SQLite file at `url`.
    static func sqlite(_ url: URL) throws -> [RawItem] {
        let db = try RawDatabase(path: url.path)
        let statement = try db.prepare("SELECT \(Raw.columns) FROM \"Item\"")
        var rows: [RawItem] = []
        while try statement.step() { rows.append(Raw.item(statement)) }
        return rows
    }

    /// Every row of the `Item` table in `schema` of the PostgreSQL database at `url`.
    static func postgres(_ url: String, schema: String) throws -> [RawItem] {
        let db = try RawPQ(url, schema: schema)
        try db.prepare("check", "SELECT \(Raw.columns) FROM \"Item\"")
        return try db.run("check", []) { result in
            (0..<PQntuples(result)).map { RawPQ.item(result, $0) }
        }
    }
}

extension RawItem: CustomStringConvertible {
    var description: String {
        "(category \(category), quantity \(quantity), rank \(rank), price \(price), score \(score), weight \(weight), code \(code), note \(note ?? "nil"))"
    }
}
