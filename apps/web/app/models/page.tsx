import { ModelsView } from './models-view';

export const metadata = { title: 'Models · KailStream' };

export default function ModelsPage() {
  return <ModelsView />;
}
