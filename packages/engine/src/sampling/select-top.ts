const INF = Infinity; // local alias: global lookups are slow under jest's vm context

/**
 * Writes the ids and values of the `k` largest of `values[0..n)` into `outIds`/`outVals`, in
 * descending order, equal values by ascending id; returns how many were written. NaN and -Infinity
 * are never selected, so fewer than `k` come back when fewer are finite or +Infinity.
 *
 * A bounded heap: one compare per element against the heap's worst, so picking 40 of 152k logits
 * costs a single pass instead of a sort of the vocabulary. Large `k` sorts the survivors instead.
 */
export function selectTop(
  values: Float32Array,
  n: number,
  k: number,
  outIds: Int32Array,
  outVals: Float32Array,
): number {
  if (k <= 0 || n <= 0) return 0;
  if (k >= n || k > 4096 || k * 16 > n) return selectBySort(values, n, k, outIds, outVals);

  // Min-heap on (value, -id): the root is the worst kept candidate, its value cached in `floor`.
  let size = 0;
  let floor = INF;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (size === k) {
      // Ids arrive in ascending order, so an equal value never beats the root.
      if (!(v > floor)) continue;
      outIds[0] = i;
      outVals[0] = v;
      siftDown(outIds, outVals, 0, size);
      floor = outVals[0];
    } else if (v > -INF) {
      let c = size++;
      outIds[c] = i;
      outVals[c] = v;
      while (c > 0) {
        const p = (c - 1) >> 1;
        if (!worse(outVals[c], outIds[c], outVals[p], outIds[p])) break;
        swap(outIds, outVals, c, p);
        c = p;
      }
      if (size === k) floor = outVals[0];
    }
  }
  // Heap sort in place: moving the worst to the end each time leaves the best first.
  for (let end = size - 1; end > 0; end--) {
    swap(outIds, outVals, 0, end);
    siftDown(outIds, outVals, 0, end);
  }
  return size;
}

function selectBySort(values: Float32Array, n: number, k: number, outIds: Int32Array, outVals: Float32Array): number {
  const idx = new Int32Array(n);
  let m = 0;
  for (let i = 0; i < n; i++) if (values[i] > -INF) idx[m++] = i;
  const kept = idx.subarray(0, m);
  sortIdsByValue(kept, values);
  const count = Math.min(k, m);
  for (let i = 0; i < count; i++) {
    outIds[i] = kept[i];
    outVals[i] = values[kept[i]];
  }
  return count;
}

/** Ids below this fit beside a 32-bit value key in a double's 53 bits (see `sortKey`). */
export const SORT_KEY_ID_LIMIT = 2 ** 21;

/**
 * A double that orders (value desc, id asc) as plain numbers ascending, so the native
 * comparator-free Float64Array sort can do the work: several times faster than a comparator on
 * 152k ids. `bits` is `values` viewed as Uint32Array; `id` < SORT_KEY_ID_LIMIT; not for NaN.
 */
export function sortKey(values: Float32Array, bits: Uint32Array, id: number): number {
  // Float bits made monotonic as unsigned integers (-0 and +0 alike), then inverted for descending.
  const b = values[id] === 0 ? 0 : bits[id];
  const ordered = b & 0x80000000 ? ~b >>> 0 : (b | 0x80000000) >>> 0;
  return (0xffffffff - ordered) * SORT_KEY_ID_LIMIT + id;
}

/** The id a `sortKey` was made from. */
export function idOfSortKey(key: number): number {
  return key % SORT_KEY_ID_LIMIT;
}

/** `values` viewed as its float bits, for `sortKey`. */
export function floatBits(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

/** Sorts `ids` in place by `values[id]` descending, equal values by ascending id. The ids must not point at NaN. */
export function sortIdsByValue(ids: Int32Array, values: Float32Array): void {
  const m = ids.length;
  if (m < 2) return;
  if (m <= 16) {
    for (let i = 1; i < m; i++) {
      const id = ids[i];
      const v = values[id];
      let j = i - 1;
      while (j >= 0 && worse(values[ids[j]], ids[j], v, id)) {
        ids[j + 1] = ids[j];
        j--;
      }
      ids[j + 1] = id;
    }
    return;
  }
  if (m >= RADIX_MIN) {
    radixSortIdsByValue(ids, values);
    return;
  }
  if (values.length > SORT_KEY_ID_LIMIT) {
    ids.sort((a, b) => values[b] - values[a] || a - b);
    return;
  }
  const bits = floatBits(values);
  const keys = new Float64Array(m);
  for (let i = 0; i < m; i++) keys[i] = sortKey(values, bits, ids[i]);
  keys.sort();
  for (let i = 0; i < m; i++) ids[i] = idOfSortKey(keys[i]);
}

/** From this many ids on, sortIdsByValue sorts by radix (about 4x faster than the double keys' sort at 152k). */
const RADIX_MIN = 4096;
let radixBuf = { keys: new Uint32Array(0), keys2: new Uint32Array(0), items2: new Int32Array(0) };

/** Scratch for radixSortByKey's keys: at least m long, reused between calls. */
export function radixKeys(m: number): Uint32Array {
  if (radixBuf.keys.length < m) radixBuf = { keys: new Uint32Array(m), keys2: new Uint32Array(m), items2: new Int32Array(m) };
  return radixBuf.keys;
}

/**
 * Sorts `items` by `keys` (keys[i] is items[i]'s; from `radixKeys(items.length)`) ascending, equal
 * keys in their order before: a stable least-significant-digit radix sort, 11, 11 and 10 bits.
 * The keys are left in no particular order.
 */
export function radixSortByKey(items: Int32Array, keys: Uint32Array): void {
  const m = items.length;
  radixKeys(m);
  let k1: Uint32Array = keys;
  let k2: Uint32Array = keys === radixBuf.keys ? radixBuf.keys2 : radixBuf.keys;
  let a: Int32Array = items;
  let b: Int32Array = radixBuf.items2;
  const count = new Int32Array(2048);
  for (const [shift, width] of [[0, 11], [11, 11], [22, 10]]) {
    const mask = (1 << width) - 1;
    count.fill(0);
    for (let i = 0; i < m; i++) count[(k1[i] >>> shift) & mask]++;
    let sum = 0;
    for (let d = 0; d <= mask; d++) {
      const c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (let i = 0; i < m; i++) {
      const k = k1[i];
      const at = count[(k >>> shift) & mask]++;
      k2[at] = k;
      b[at] = a[i];
    }
    [k1, k2] = [k2, k1];
    [a, b] = [b, a];
  }
  // Three passes: the sorted items are in the scratch array.
  if (a !== items) items.set(a.subarray(0, m));
}

/**
 * sortIdsByValue for many ids: the ids in ascending order first, then radixSortByKey by their
 * value keys (as `sortKey`'s, without the id), so equal values stay in ascending id order.
 */
function radixSortIdsByValue(ids: Int32Array, values: Float32Array): void {
  const m = ids.length;
  for (let i = 1; i < m; i++)
    if (ids[i] < ids[i - 1]) {
      ids.sort();
      break;
    }
  const keys = radixKeys(m);
  const bits = floatBits(values);
  for (let i = 0; i < m; i++) {
    const id = ids[i];
    const v = values[id] === 0 ? 0 : bits[id];
    keys[i] = (0xffffffff - (v & 0x80000000 ? ~v >>> 0 : (v | 0x80000000) >>> 0)) >>> 0;
  }
  radixSortByKey(ids, keys);
}

/** Whether (va, ia) ranks below (vb, ib): smaller value, or equal value and larger id. */
function worse(va: number, ia: number, vb: number, ib: number): boolean {
  return va < vb || (va === vb && ia > ib);
}

function siftDown(ids: Int32Array, vals: Float32Array, i: number, size: number): void {
  for (;;) {
    const l = 2 * i + 1;
    if (l >= size) return;
    const r = l + 1;
    let w = l;
    if (r < size && worse(vals[r], ids[r], vals[l], ids[l])) w = r;
    if (!worse(vals[w], ids[w], vals[i], ids[i])) return;
    swap(ids, vals, i, w);
    i = w;
  }
}

function swap(ids: Int32Array, vals: Float32Array, a: number, b: number): void {
  const ti = ids[a];
  ids[a] = ids[b];
  ids[b] = ti;
  const tv = vals[a];
  vals[a] = vals[b];
  vals[b] = tv;
}

/**
 * Whether `x` is a Float32Array from any realm: `instanceof` fails for arrays made by a native
 * addon or in another vm context (as under jest).
 */
export function isFloat32Array(x: unknown): x is Float32Array {
  return ArrayBuffer.isView(x) && (x as { [Symbol.toStringTag]?: string })[Symbol.toStringTag] === 'Float32Array';
}
