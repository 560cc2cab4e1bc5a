// Types of the GGUF binding (addon/addon_gguf.cpp), exactly as it builds its values. Meant to be
// re-exported by addon-types.ts so the native surface keeps one hand-written description.

/** GGUF scalar type names, as the binding spells them in `metadataTypes`. */
export type GgufScalarTypeName =
  | 'uint8'
  | 'int8'
  | 'uint16'
  | 'int16'
  | 'uint32'
  | 'int32'
  | 'float32'
  | 'bool'
  | 'string'
  | 'uint64'
  | 'int64'
  | 'float64';

/**
 * Type of a metadata value: a scalar name, `array<element>` for arrays (e.g. `array<string>`,
 * `array<float32>`), or `array<array>` for arrays of arrays (whose inner element types may differ).
 */
export type GgufTypeName = GgufScalarTypeName | `array<${GgufScalarTypeName}>` | 'array<array>';

/**
 * A numeric GGUF array. Every numeric array is a typed array, whatever its length, so a value's JS
 * type follows from its GGUF type alone: uint8 → Uint8Array, int8 → Int8Array, uint16 → Uint16Array,
 * int16 → Int16Array, uint32 → Uint32Array, int32 → Int32Array, float32 → Float32Array,
 * float64 → Float64Array, uint64 → BigUint64Array, int64 → BigInt64Array.
 */
export type GgufNumericArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigUint64Array
  | BigInt64Array;

/**
 * A metadata value. Integers and floats are numbers, except uint64/int64 values beyond ±(2^53 − 1),
 * which are BigInts; bool is boolean; strings are strings (invalid UTF-8 decoded with U+FFFD).
 * Arrays: numeric → typed array; bool → boolean[]; string → string[]; array of arrays → an array
 * of converted values.
 */
export type GgufValue = number | bigint | boolean | string | GgufNumericArray | boolean[] | string[] | GgufValue[];

export interface GgufTensorInfo {
  readonly name: string;
  /** ggml type id (types.h), e.g. 0 F32, 1 F16, 8 Q8_0, 12 Q4_K. */
  readonly type: number;
  /** ggml type name, e.g. "F32", "Q4_K". */
  readonly typeName: string;
  /** Elements per dimension, ne[0] (contiguous) first; 1 to 4 entries, each > 0. */
  readonly dims: readonly number[];
  /** Absolute offset of the first byte in its split file (that file's data offset + the offset stored there). */
  readonly offset: number;
  /** The split file holding it (index into `splits`; 0 for a model in one file). */
  readonly split: number;
  /** Size of the data in bytes (unpadded). */
  readonly nbytes: number;
}

export interface GgufOpenOptions {
  /**
   * Keep the whole file mapped for the life of the handle. `true` (default): map it (models).
   * `false`: drop the mapping after parsing, keeping only metadata and the tensor table
   * (vocabularies, `inspect`). `tensorData()` works either way.
   */
  mapData?: boolean;
}

/**
 * An open, validated GGUF file. Reading `metadata`, `metadataTypes`, `tensors` or calling
 * `tensorData()` after `close()` throws KAIL_E_INVALID_ARG; the scalar fields stay readable.
 * Call `close()` when done: the handle holds a file descriptor (and the mapping) until then or
 * until it is garbage-collected.
 */
export interface NativeGgufFile {
  /** GGUF version: 2 or 3. */
  readonly version: 2 | 3;
  /** Data alignment in bytes (`general.alignment`, default 32). */
  readonly alignment: number;
  /** Absolute file offset where the tensor data section starts. */
  readonly dataOffset: number;
  /** Bytes of the model: every split file's. */
  readonly fileSize: number;
  /** The path opened (a split model's first split). */
  readonly path: string;
  /**
   * The files of the model: one, or a split model's splits in order (PREFIX-0000i-of-0000N.gguf,
   * llama.cpp's gguf-split naming), each with its size. Tensors name theirs by index.
   */
  readonly splits: readonly { readonly path: string; readonly bytes: number }[];
  readonly closed: boolean;
  /** Key → value in file order; built on first access, then the same frozen object. */
  readonly metadata: Readonly<Record<string, GgufValue>>;
  /** Key → GGUF type name, e.g. "uint32", "array<string>". */
  readonly metadataTypes: Readonly<Record<string, GgufTypeName>>;
  /** Tensor table in file order (frozen). */
  readonly tensors: readonly GgufTensorInfo[];
  /**
   * The tensor's bytes, without a copy: a Uint8Array over a private copy-on-write mapping of the
   * file. Writes stay in this process (the file and other views never change), and the view stays
   * valid after `close()`. Throws KAIL_E_INVALID_ARG for an unknown name.
   */
  tensorData(name: string): Uint8Array;
  /** Releases the file (idempotent). */
  close(): void;
}

export interface AddonGguf {
  /**
   * Opens and validates a GGUF file. Throws an Error with `code` KAIL_E_BAD_MODEL (malformed file;
   * the message names the field and its file offset), KAIL_E_IO (open/mmap failure, with the system
   * error text) or KAIL_E_INVALID_ARG (bad arguments).
   */
  openGguf(path: string, options?: GgufOpenOptions): NativeGgufFile;
}
