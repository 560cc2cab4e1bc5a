import { TRPCError } from '@trpc/server';
import { z } from 'zod';
import { engine as pb, scheduler as spb, type common } from '@kailstream/proto';

import { unary } from '../grpc-call';
import { protectedProcedure, router } from '../trpc';
import { loraScales } from '../../sampler-extras';

const engineId = z.string().max(200).default('');
const bytes = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

/** Bytes per place of a model (common.ModelTierBytes as plain numbers). */
export interface TierBytes {
  residentBytes: number;
  expertBytes: number;
  kvBytes: number;
  ramExpertCacheBytes: number;
  vramExpertCacheBytes: number;
}

function tierBytes(r: common.ModelTierBytes | undefined): TierBytes | null {
  return r ? { residentBytes: r.residentBytes, expertBytes: r.expertBytes, kvBytes: r.kvBytes, ramExpertCacheBytes: r.ramExpertCacheBytes, vramExpertCacheBytes: r.vramExpertCacheBytes } : null;
}

/** ModelInfo as the console shows it (tensor type bytes as a sorted list). */
function modelView(m: common.ModelInfo) {
  return {
    id: m.id,
    path: m.path,
    architecture: m.architecture,
    parameterCount: m.parameterCount,
    fileBytes: m.fileBytes,
    contextLength: m.contextLength,
    expertCount: m.expertCount,
    expertUsedCount: m.expertUsedCount,
    layerCount: m.layerCount,
    loaded: m.loaded,
    /** An embedding model (bert, nomic-bert): embeddings and reranking, no text. */
    embeddingOnly: m.embeddingOnly,
    /** When an idle model unloads (the scheduler's keep-alive), ms since the epoch; 0: it stays. */
    expiresAtUnixMs: m.expiresAtUnixMs,
    /** A loaded model's KV cache type (f16, q8_0, q4_0, ...: KV_TYPES); '' for a file not loaded. */
    kvType: m.kvType,
    /** Its V rows' type (llama.cpp's -ctv), kvType unless set apart. */
    kvTypeV: m.kvTypeV || m.kvType,
    /** Its LoRA adapters with their default scales. */
    loraAdapters: m.loraAdapters.map((l) => ({ path: l.path, scale: l.scale })),
    residency: tierBytes(m.residency),
    /** general.file_type as llama-quantize names it (Q4_K_M); '' when the file does not say. */
    fileType: m.fileType,
    tensorTypes: Object.entries(m.tensorTypeBytes)
      .map(([type, b]) => ({ type, bytes: b }))
      .sort((a, b) => b.bytes - a.bytes),
  };
}
export type ModelView = ReturnType<typeof modelView>;

const planInput = z.object({
  engineId,
  path: z.string().min(1, 'path is required').max(4096),
  contextLength: z.number().int().min(0).max(1 << 24).default(0),
  ramBudgetBytes: bytes.default(0),
  vramBudgetBytes: bytes.default(0),
});

export const modelsRouter = router({
  /**
   * Starts pulling a Hugging Face repository's GGUF (USER/REPO[:QUANT]) into the models directory,
   * as `kail pull` does; returns its job at once (models.pulls follows it).
   */
  pull: protectedProcedure.input(z.object({ ref: z.string().min(1, 'a repository is required').max(300) })).mutation(({ ctx, input }) => {
    if (!ctx.deps.pulls?.enabled) throw new TRPCError({ code: 'PRECONDITION_FAILED', message: 'pulling needs a data directory (kail serve --data-dir)' });
    try {
      return ctx.deps.pulls.start(input.ref);
    } catch (e) {
      throw new TRPCError({ code: 'BAD_REQUEST', message: (e as Error).message });
    }
  }),
  /** The console's pulls, newest first: running, done or failed. */
  pulls: protectedProcedure.query(({ ctx }) => ctx.deps.pulls?.list() ?? []),
  /** GGUF files in the engine's models directory, with their header summaries. */
  files: protectedProcedure.input(z.object({ engineId }).default({ engineId: '' })).query(async ({ ctx, input }) => {
    const s = ctx.deps.scheduler();
    const r = await unary<spb.ListModelFilesRequest, pb.ListModelFilesResponse>(s, s?.listModelFiles, { engineId: input.engineId });
    return {
      modelsDir: r.modelsDir,
      files: r.files.map((f) => ({ path: f.path, id: f.id, sizeBytes: f.sizeBytes, architecture: f.architecture, error: f.error, info: f.info ? modelView(f.info) : null })),
    };
  }),

  /** Models loaded on the engines. */
  loaded: protectedProcedure.query(async ({ ctx }) => {
    const s = ctx.deps.scheduler();
    const r = await unary<spb.ListModelsRequest, spb.ListModelsResponse>(s, s?.listModels, {});
    return r.models.map(modelView);
  }),

  /** The residency plan (resident, expert and KV bytes per tier) a load would apply; changes nothing. */
  plan: protectedProcedure.input(planInput).query(async ({ ctx, input }) => {
    const s = ctx.deps.scheduler();
    const { engineId: eid, ...plan } = input;
    const r = await unary<spb.PlanModelRequest, pb.PlanModelResponse>(s, s?.planModel, { engineId: eid, plan: pb.PlanModelRequest.fromPartial(plan) }, 30_000);
    let detailJson: unknown = null;
    try {
      detailJson = r.planJson ? JSON.parse(r.planJson) : null;
    } catch {
      detailJson = r.planJson;
    }
    return {
      residency: tierBytes(r.residency),
      cacheExpertsPerLayer: r.cacheExpertsPerLayer,
      coldBytesPerToken: r.coldBytesPerToken,
      fits: r.fits,
      detail: r.detail,
      plan: detailJson,
    };
  }),

  load: protectedProcedure
    .input(
      planInput.extend({
        id: z.string().max(200).regex(/^[A-Za-z0-9._:-]*$/, 'id may hold letters, digits and . _ : - only').default(''),
        threads: z.number().int().min(0).max(1024).default(0),
        // Speculative decoding for this model (LoadModelRequest): a draft GGUF in the models
        // directory, prompt lookup, or the file's own MTP block; the engine refuses a mix.
        draftPath: z.string().max(4096).default(''),
        lookupDecoding: z.boolean().default(false),
        mtpDecoding: z.boolean().default(false),
        speculativeK: z.number().int().min(0).max(32).default(0),
        // LoRA adapters (files on the engine's machine) and their scales.
        lora: z.array(z.object({ path: z.string().min(1).max(4096), scale: z.number().min(-1e6).max(1e6).default(1) })).max(64).default([]),
      }),
    )
    .mutation(async ({ ctx, input }) => {
      const s = ctx.deps.scheduler();
      const { engineId: eid, ...load } = input;
      // Loading maps and plans the whole file: minutes for a large model.
      const r = await unary<spb.LoadModelRequest, pb.LoadModelResponse>(s, s?.loadModel, { engineId: eid, load: pb.LoadModelRequest.fromPartial(load) }, 600_000);
      return r.model ? modelView(r.model) : null;
    }),

  // A loaded model's default LoRA scales (llama-server's POST /lora-adapters): the adapters named
  // take the scale given, the others 0.
  setLora: protectedProcedure
    .input(z.object({ engineId, id: z.string().min(1, 'id is required').max(200), lora: loraScales }))
    .mutation(async ({ ctx, input }) => {
      const s = ctx.deps.scheduler();
      const r = await unary<spb.SetLoraAdaptersRequest, pb.SetLoraAdaptersResponse>(s, s?.setLoraAdapters, { engineId: input.engineId, set: { model: input.id, lora: input.lora } }, 60_000);
      return r.model ? modelView(r.model) : null;
    }),

  unload: protectedProcedure.input(z.object({ engineId, id: z.string().min(1, 'id is required').max(200) })).mutation(async ({ ctx, input }) => {
    const s = ctx.deps.scheduler();
    await unary<spb.UnloadModelRequest, pb.UnloadModelResponse>(s, s?.unloadModel, { engineId: input.engineId, unload: { id: input.id, ifIdle: false } }, 60_000);
    return { unloaded: input.id };
  }),
});
