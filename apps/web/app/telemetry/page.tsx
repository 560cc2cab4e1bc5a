import { TelemetryView } from './telemetry-view';

export const metadata = { title: 'Telemetry · KailStream' };

export default function TelemetryPage() {
  return <TelemetryView />;
}
