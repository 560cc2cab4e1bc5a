import type { ArchDefinition } from '../arch';
import { arctic } from './arctic';
import { bert, nomicBert, nomicBertMoe } from './bert';
import { dbrx } from './dbrx';
import { deepseek2, deepseek2Ocr, deepseek32, glmDsa, mistral4 } from './deepseek2';
import { dots3note } from './dots3note';
import { hyV4 } from './hy-v4';
import { deepseek4 } from './deepseek4';
import { gemma, gemma2, gemma3, gemmaEmbedding } from './gemma';
import { gemma4 } from './gemma4';
import { gemma3n } from './gemma3n';
import { hrmText } from './hrm-text';
import { glm4moe } from './glm4moe';
import { gptOss } from './gpt-oss';
import { graniteDense, graniteHybrid, graniteMoe, graniteSwa } from './granite';
import { graniteSwitch } from './granite-switch';
import { grok } from './grok';
import { grovemoe } from './grovemoe';
import { jamba } from './jamba';
import { kimiK3 } from './kimi-k3';
import { kimiLinear } from './kimi-linear';
import { bailingMoe3 } from './bailingmoe3';
import { laguna } from './laguna';
import { mimo2 } from './mimo2';
import { minimax01 } from './minimax01';
import { minimaxM3 } from './minimax-m3';
import { mistral3 } from './mistral3';
import { nemotronH, nemotronHMoe } from './nemotron-h';
import { olmoe } from './olmoe';
import { phi3, phimoe } from './phi3';
import { llama, mixtral } from './llama';
import { afmoe, bailingMoe, bailingMoe2, deepseek, dots1, ernie45Moe, exaoneMoe, hunyuanMoe, hyV3, llama4, minimaxM2, smallthinker } from './llama-moe';
import { qwen2moe } from './qwen2moe';
import { qwen3 } from './qwen3';
import { qwen3moe } from './qwen3moe';
import { qwen35, qwen35moe, qwen3next } from './qwen35';
import { qwen4exp } from './qwen4exp';
import { step35 } from './step35';
import { falconH1, mamba, mamba2 } from './ssm';
import { plamo2 } from './plamo2';
import { arwkv7, rwkv6, rwkv6qwen2, rwkv7 } from './rwkv';
import { maple, mellum } from './mellum-maple';
import { lfm2, lfm2moe } from './lfm2';
import { qwen3vl, qwen3vlmoe } from './qwen3vl';
import { cohere2moe } from './cohere2moe';
import { cohere2, commandR } from './cohere-dense';
import { dream, llada, lladaMoe, rnd1 } from './diffusion';
import { apertus, arcee, ernie45, exaone, exaone4, glm4, hunyuanDense, internlm2, maincoder, minicpm, nanbeige, nemotron, olmo, olmo2, orion, seedOss, smollm3, stablelm, starcoder2, xverse } from './llama-dense';
import { chatglm, falcon, gptneox, phi2 } from './llama-dense';
import { codeshell, gpt2, qwen, starcoder } from './llama-dense';
import { baichuan, bloom, mpt, refact } from './llama-dense';
import { hunyuanVl, openelm, panguEmbedded, plamo, plamo3, qwen2vl } from './misc-dense';
import { chameleon, cogvlm, paddleocr } from './text-vl';
import { museGlimmer } from './muse-glimmer';
import { minicpm3, plm } from './mla-dense';
import { bitnet, jais, jais2 } from './jais-bitnet';
import { eurobert, llamaEmbed, modernBert, neoBert } from './encoders-llama';
import { jinaBertV2, jinaBertV3 } from './jina-bert';
import { t5, t5Encoder } from './t5';
import { deci } from './deci';
import { eagle3 } from './eagle3';
import { gemma4Assistant } from './gemma4-assistant';
import { dflash } from './dflash';

const ARCHS = new Map<string, ArchDefinition>();

/** Adds an architecture builder (deepseek2, glm4moe, olmoe, ... register here). */
export function registerArch(def: ArchDefinition): void {
  if (ARCHS.has(def.name)) throw new Error(`architecture '${def.name}' already registered`);
  ARCHS.set(def.name, def);
}

export function getArch(name: string): ArchDefinition {
  const a = ARCHS.get(name);
  if (!a) throw new Error(`unknown architecture '${name}'; known: ${[...ARCHS.keys()].join(', ')}`);
  return a;
}

export function archNames(): string[] {
  return [...ARCHS.keys()];
}

for (const a of [llama, mixtral, qwen2moe, qwen3, qwen3moe]) registerArch(a);
for (const a of [deepseek2, deepseek32, glmDsa, mistral4, deepseek2Ocr, glm4moe, olmoe, gptOss]) registerArch(a);
for (const a of [bert, nomicBert, nomicBertMoe]) registerArch(a);
for (const a of [deepseek, dots1, ernie45Moe, minimaxM2, llama4, hunyuanMoe, bailingMoe, bailingMoe2, qwen3vl, qwen3vlmoe, graniteDense, graniteMoe, graniteSwa, phi3, phimoe, mimo2, exaoneMoe, afmoe, mistral3, hyV3, qwen35, qwen35moe, qwen3next, lfm2, lfm2moe, nemotronH, nemotronHMoe, graniteHybrid, jamba, gemma4, gemma, gemma2, gemma3, smallthinker, step35, grok, dbrx, arctic]) registerArch(a);
for (const a of [mellum, maple]) registerArch(a);
registerArch(grovemoe);
registerArch(gemma3n);
registerArch(graniteSwitch);
registerArch(hrmText);
registerArch(laguna);
registerArch(kimiLinear);
registerArch(kimiK3);
registerArch(bailingMoe3);
registerArch(dots3note);
for (const a of [qwen2vl, hunyuanVl, plamo, plamo3, panguEmbedded, openelm]) registerArch(a);
for (const a of [paddleocr, cogvlm, chameleon, museGlimmer]) registerArch(a);
registerArch(hyV4);
registerArch(deepseek4);
registerArch(qwen4exp);
registerArch(cohere2moe);
registerArch(minicpm3);
registerArch(plm);
registerArch(deci);
registerArch(cohere2);
registerArch(commandR);
registerArch(minimax01);
registerArch(minimaxM3);
for (const a of [olmo2, seedOss, smollm3, exaone4, ernie45, hunyuanDense, glm4, apertus]) registerArch(a);
for (const a of [internlm2, exaone, xverse, nanbeige, arcee, maincoder, orion, olmo, starcoder2, minicpm, stablelm, nemotron]) registerArch(a);
for (const a of [gptneox, phi2, falcon, chatglm]) registerArch(a);
for (const a of [gpt2, starcoder, codeshell, qwen]) registerArch(a);
for (const a of [bloom, mpt, refact, baichuan]) registerArch(a);
for (const a of [jais, jais2, bitnet]) registerArch(a);
for (const a of [eurobert, neoBert, llamaEmbed, jinaBertV2, gemmaEmbedding, modernBert]) registerArch(a);
for (const a of [jinaBertV3, t5Encoder, t5]) registerArch(a);
for (const a of [mamba, mamba2, falconH1]) registerArch(a);
registerArch(plamo2);
registerArch(rwkv7);
registerArch(arwkv7);
registerArch(rwkv6);
registerArch(rwkv6qwen2);
for (const a of [llada, dream, lladaMoe, rnd1]) registerArch(a);
registerArch(eagle3);
registerArch(gemma4Assistant);
registerArch(dflash);
