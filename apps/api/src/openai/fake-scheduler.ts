import { EventEmitter } from 'node:events';
import { common, engine as pb, type scheduler as spb } from '@kailstream/proto';

/**
 * For specs: a scheduler client whose every request answers with the given text, in chunks of 5
 * characters (each message also carrying `extra`), then STOP.
 */
export function fakeScheduler(text: string, extra: Partial<pb.GenerateResponse> = {}): spb.SchedulerServiceClient {
  return {
    submit: () => {
      const call = Object.assign(new EventEmitter(), { cancel: () => undefined });
      setImmediate(() => {
        for (let i = 0; i < text.length; i += 5) call.emit('data', pb.GenerateResponse.fromPartial({ ...extra, text: text.slice(i, i + 5), tokens: [1] }));
        call.emit('data', pb.GenerateResponse.fromPartial({ ...extra, finishReason: common.FinishReason.FINISH_REASON_STOP, usage: { promptTokens: 3, completionTokens: 9 } }));
        call.emit('end');
      });
      return call;
    },
  } as unknown as spb.SchedulerServiceClient;
}
